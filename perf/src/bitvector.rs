//! The aggregated bit vector (ABV) classifier: the Lucent bit-vector scheme with one
//! aggregate bit per 64-bit word. Not on the data path (which classifies with
//! `acl::Compiled`): `ferrule-aclbench --alg abv` measures it beside the others.
//!
//! Build: each of the five fields (source address, destination address, source port,
//! destination port, protocol) splits its value space into elementary intervals at every
//! rule's range endpoints (prefixes become ranges; a protocol set — any, exact or
//! value/mask — is expanded over the 256 protocol values). Every interval gets the bitmap
//! of the rules covering it (bit `i` is rule `i`, so bit order is priority order) and an
//! aggregate bitmap with bit `w` set when word `w` of that bitmap is non-zero. Identical
//! bitmaps are stored once per field.
//!
//! Lookup of an IPv4 key: a 16-bit direct table narrowing a binary search per address field and a direct table per port
//! and protocol field give five bitmaps; their aggregates are ANDed, and only the words
//! whose aggregate bit survives are ANDed, lowest first. The first non-zero word's lowest
//! set bit is the first matching rule, so the scan stops there.
//!
//! IPv6: the bit vectors index only the rules that can match an IPv4 key (both prefixes
//! IPv4 or any). A key that is not IPv4 on both addresses is classified by a linear
//! first-match scan of the rules that can match it (every rule not IPv4 on both
//! prefixes), so mixed IPv4/IPv6 rule sets classify correctly, IPv6 keys at linear speed.

use ferrule_dataplane::acl::{
    Classifier, ClassifierError, FlowKey, PortRange, Prefix, Rule, NO_MATCH,
};
use ferrule_dataplane::flow::Family;
use rustc_hash::FxHashMap;

/// The most memory one field's bitmaps may take before the build is refused.
pub const MAX_FIELD_BYTES: usize = 1 << 30;

/// Keys resolved to interval bitmaps before any is ANDed, within one batch.
const STAGE: usize = 32;

/// The distinct interval bitmaps of one field, with their aggregates.
#[derive(Debug, Default)]
struct Bitmaps {
    /// Per bitmap, `aggs` aggregate words (bit `w` set when word `w` is non-zero) then
    /// its `words` words, so the aggregate shares the bitmap's first cache line; bitmap
    /// `id` at `id * (aggs + words)`.
    data: Vec<u64>,
}

/// Interns bitmaps of one field while it is built.
struct Interner {
    field: &'static str,
    words: usize,
    aggs: usize,
    bitmaps: Bitmaps,
    ids: FxHashMap<Vec<u64>, u32>,
}

impl Interner {
    fn new(field: &'static str, words: usize) -> Self {
        Self {
            field,
            words,
            aggs: words.div_ceil(64),
            bitmaps: Bitmaps::default(),
            ids: FxHashMap::default(),
        }
    }

    fn too_large(&self) -> ClassifierError {
        ClassifierError::TooLarge {
            field: self.field,
            limit: MAX_FIELD_BYTES,
        }
    }

    /// The id of `bitmap`, stored if new.
    fn intern(&mut self, bitmap: &[u64]) -> Result<u32, ClassifierError> {
        if let Some(&id) = self.ids.get(bitmap) {
            return Ok(id);
        }
        let count = self.ids.len() + 1;
        let bytes = count
            .checked_mul((self.words + self.aggs) * 8)
            .ok_or_else(|| self.too_large())?;
        if bytes > MAX_FIELD_BYTES {
            return Err(self.too_large());
        }
        let id = u32::try_from(self.ids.len()).map_err(|_| self.too_large())?;
        let start = self.bitmaps.data.len();
        self.bitmaps.data.resize(start + self.aggs, 0);
        for (w, word) in bitmap.iter().enumerate() {
            if *word != 0 {
                self.bitmaps.data[start + w / 64] |= 1 << (w % 64);
            }
        }
        self.bitmaps.data.extend_from_slice(bitmap);
        self.ids.insert(bitmap.to_vec(), id);
        Ok(id)
    }

    fn finish(mut self) -> Bitmaps {
        self.bitmaps.data.shrink_to_fit();
        self.bitmaps
    }
}

/// Elementary intervals of a field `0..=max` from inclusive `ranges` (one per rule, in
/// rule order): the interval start values, ascending from 0, and each interval's bitmap
/// id.
fn sweep(
    interner: &mut Interner,
    ranges: &[(u64, u64)],
    max: u64,
) -> Result<(Vec<u64>, Vec<u32>), ClassifierError> {
    let mut starts: Vec<u64> = Vec::with_capacity(ranges.len() * 2 + 1);
    starts.push(0);
    for &(lo, hi) in ranges {
        starts.push(lo);
        if hi < max {
            starts.push(hi + 1);
        }
    }
    starts.sort_unstable();
    starts.dedup();
    let interval = |value: u64| starts.partition_point(|&start| start <= value) - 1;

    // Per interval: rules entering at it and rules leaving at it.
    let mut events: Vec<(usize, bool, usize)> = Vec::with_capacity(ranges.len() * 2);
    for (rule, &(lo, hi)) in ranges.iter().enumerate() {
        events.push((interval(lo), true, rule));
        if hi < max {
            events.push((interval(hi + 1), false, rule));
        }
    }
    events.sort_unstable();

    let mut current = vec![0u64; interner.words];
    let mut ids = Vec::with_capacity(starts.len());
    let mut next = events.iter().peekable();
    for index in 0..starts.len() {
        while let Some(&&(at, enters, rule)) = next.peek() {
            if at != index {
                break;
            }
            if enters {
                current[rule / 64] |= 1 << (rule % 64);
            } else {
                current[rule / 64] &= !(1 << (rule % 64));
            }
            next.next();
        }
        ids.push(interner.intern(&current)?);
    }
    Ok((starts, ids))
}

/// An address field: interval starts for a binary search, and their bitmaps.
#[derive(Debug)]
struct AddrField {
    starts: Vec<u32>,
    /// Per value of the top 16 bits, the interval holding its lowest address.
    first: Vec<u32>,
    ids: Vec<u32>,
    bitmaps: Bitmaps,
}

impl AddrField {
    fn build(
        field: &'static str,
        words: usize,
        prefixes: impl Iterator<Item = Prefix>,
    ) -> Result<Self, ClassifierError> {
        let ranges: Vec<(u64, u64)> = prefixes
            .map(|prefix| {
                // Only IPv4-capable rules are indexed: the rest is any.
                let (lo, hi) = prefix.v4_range().unwrap_or((0, u32::MAX));
                (u64::from(lo), u64::from(hi))
            })
            .collect();
        let mut interner = Interner::new(field, words);
        let (starts, ids) = sweep(&mut interner, &ranges, u64::from(u32::MAX))?;
        let starts: Vec<u32> = starts.into_iter().map(|s| s as u32).collect();
        // `first[h]`: the interval holding `h << 16`; `starts` begins with 0.
        let first = (0..=u32::from(u16::MAX))
            .map(|high| (starts.partition_point(|&start| start <= high << 16) - 1) as u32)
            .collect();
        Ok(Self {
            starts,
            first,
            ids,
            bitmaps: interner.finish(),
        })
    }

    /// The bitmap id of `value`: the top 16 bits select a short run of interval starts
    /// through `first`, binary searched for the rest.
    #[inline]
    fn find(&self, value: u32) -> usize {
        let high = (value >> 16) as usize;
        let lo = self.first[high] as usize;
        let hi = self
            .first
            .get(high + 1)
            .map_or(self.starts.len(), |&next| next as usize + 1);
        let run = &self.starts[lo..hi];
        let index = lo + run.partition_point(|&start| start <= value) - 1;
        self.ids[index] as usize
    }

    fn memory_bytes(&self) -> usize {
        self.starts.capacity() * 4
            + self.first.capacity() * 4
            + self.ids.capacity() * 4
            + self.bitmaps.memory_bytes()
    }
}

impl Bitmaps {
    /// Bitmap `id` and its aggregate.
    #[inline]
    fn get(&self, id: usize, words: usize, aggs: usize) -> (&[u64], &[u64]) {
        let (agg, bits) = self.data[id * (aggs + words)..][..aggs + words].split_at(aggs);
        (bits, agg)
    }

    fn memory_bytes(&self) -> usize {
        self.data.capacity() * 8
    }
}

/// A port field: a direct table from port to bitmap id.
#[derive(Debug)]
struct PortField {
    table: Vec<u16>,
    bitmaps: Bitmaps,
}

impl PortField {
    fn build(
        field: &'static str,
        words: usize,
        ranges: impl Iterator<Item = PortRange>,
    ) -> Result<Self, ClassifierError> {
        let ranges: Vec<(u64, u64)> = ranges
            .map(|range| (u64::from(range.lo), u64::from(range.hi)))
            .collect();
        let mut interner = Interner::new(field, words);
        let (starts, ids) = sweep(&mut interner, &ranges, 65535)?;
        let mut table = vec![0u16; 65536];
        for (index, (&start, &id)) in starts.iter().zip(&ids).enumerate() {
            let end = starts.get(index + 1).map_or(65536, |&next| next as usize);
            let id = u16::try_from(id).map_err(|_| interner.too_large())?;
            table[start as usize..end].fill(id);
        }
        Ok(Self {
            table,
            bitmaps: interner.finish(),
        })
    }

    fn memory_bytes(&self) -> usize {
        self.table.capacity() * 2 + self.bitmaps.memory_bytes()
    }
}

/// An aggregated bit vector classifier over one ordered rule table; first match wins.
#[derive(Debug)]
pub struct BitVectorClassifier {
    /// u64 words per bitmap.
    words: usize,
    /// u64 words per aggregate bitmap.
    aggs: usize,
    src: AddrField,
    dst: AddrField,
    src_port: PortField,
    dst_port: PortField,
    proto_table: [u8; 256],
    proto: Bitmaps,
    /// Bit index → rule index, for the IPv4-capable rules the bitmaps index.
    rule_index: Vec<u32>,
    /// Rules that can match a key not IPv4 on both addresses, with their indices.
    fallback: Vec<(u32, Rule)>,
}

impl BitVectorClassifier {
    /// Builds the classifier over `rules`, in priority order (index 0 first).
    pub fn new(rules: &[Rule]) -> Result<Self, ClassifierError> {
        let max = NO_MATCH as usize;
        if rules.len() > max {
            return Err(ClassifierError::TooManyRules {
                rules: rules.len(),
                max,
            });
        }
        let v4_capable = |prefix: &Prefix| prefix.is_v4() != Some(false);
        let mut indexed: Vec<&Rule> = Vec::new();
        let mut rule_index = Vec::new();
        let mut fallback = Vec::new();
        for (index, rule) in rules.iter().enumerate() {
            // `index < NO_MATCH` by the check above.
            let index = index as u32;
            if v4_capable(&rule.src) && v4_capable(&rule.dst) {
                indexed.push(rule);
                rule_index.push(index);
            }
            let both_v4 = (rule.src.is_v4(), rule.dst.is_v4()) == (Some(true), Some(true));
            if !both_v4 {
                fallback.push((index, rule.clone()));
            }
        }
        let words = indexed.len().div_ceil(64);

        let src = AddrField::build("src", words, indexed.iter().map(|rule| rule.src))?;
        let dst = AddrField::build("dst", words, indexed.iter().map(|rule| rule.dst))?;
        let src_port =
            PortField::build("src_port", words, indexed.iter().map(|rule| rule.src_port))?;
        let dst_port =
            PortField::build("dst_port", words, indexed.iter().map(|rule| rule.dst_port))?;

        let mut interner = Interner::new("proto", words);
        let mut proto_table = [0u8; 256];
        let mut bitmap = vec![0u64; words];
        for value in 0..=255u8 {
            bitmap.fill(0);
            for (bit, rule) in indexed.iter().enumerate() {
                if rule.proto.matches(value) {
                    bitmap[bit / 64] |= 1 << (bit % 64);
                }
            }
            let id = interner.intern(&bitmap)?;
            proto_table[usize::from(value)] = u8::try_from(id).map_err(|_| interner.too_large())?;
        }

        Ok(Self {
            words,
            aggs: words.div_ceil(64),
            src,
            dst,
            src_port,
            dst_port,
            proto_table,
            proto: interner.finish(),
            rule_index,
            fallback,
        })
    }

    /// The index of the first rule matching `key`, if any.
    pub fn classify(&self, key: &FlowKey) -> Option<usize> {
        let result = match self.ids(key) {
            Some(ids) => self.resolve(ids),
            None => self.classify_fallback(key),
        };
        (result != NO_MATCH).then_some(result as usize)
    }

    /// The five bitmap ids of an IPv4 key, or `None` for a key the bitmaps do not cover.
    #[inline]
    fn ids(&self, key: &FlowKey) -> Option<[usize; 5]> {
        if key.family != Family::V4 {
            return None;
        }
        Some([
            self.src.find(key.src_v4()),
            self.dst.find(key.dst_v4()),
            usize::from(self.src_port.table[usize::from(key.src_port)]),
            usize::from(self.dst_port.table[usize::from(key.dst_port)]),
            usize::from(self.proto_table[usize::from(key.proto)]),
        ])
    }

    /// The first rule set in all five bitmaps, or [`NO_MATCH`].
    #[inline]
    fn resolve(&self, [s, d, sp, dp, p]: [usize; 5]) -> u32 {
        let (words, aggs) = (self.words, self.aggs);
        let (s_bits, s_agg) = self.src.bitmaps.get(s, words, aggs);
        let (d_bits, d_agg) = self.dst.bitmaps.get(d, words, aggs);
        let (sp_bits, sp_agg) = self.src_port.bitmaps.get(sp, words, aggs);
        let (dp_bits, dp_agg) = self.dst_port.bitmaps.get(dp, words, aggs);
        let (p_bits, p_agg) = self.proto.get(p, words, aggs);
        for a in 0..aggs {
            let mut agg = s_agg[a] & d_agg[a] & sp_agg[a] & dp_agg[a] & p_agg[a];
            while agg != 0 {
                let w = a * 64 + agg.trailing_zeros() as usize;
                let word = s_bits[w] & d_bits[w] & sp_bits[w] & dp_bits[w] & p_bits[w];
                if word != 0 {
                    return self.rule_index[w * 64 + word.trailing_zeros() as usize];
                }
                agg &= agg - 1;
            }
        }
        NO_MATCH
    }

    fn classify_fallback(&self, key: &FlowKey) -> u32 {
        self.fallback
            .iter()
            .find(|(_, rule)| rule.matches(key))
            .map_or(NO_MATCH, |&(index, _)| index)
    }
}

impl Classifier for BitVectorClassifier {
    fn classify_batch(&self, keys: &[FlowKey], out: &mut [u32]) {
        assert!(out.len() >= keys.len(), "output shorter than the burst");
        // Resolve every key's intervals first (independent searches overlap their
        // cache misses), then AND the bitmaps.
        let mut staged = [None; STAGE];
        for (keys, out) in keys.chunks(STAGE).zip(out.chunks_mut(STAGE)) {
            for (key, ids) in keys.iter().zip(staged.iter_mut()) {
                *ids = self.ids(key);
            }
            for ((key, ids), slot) in keys.iter().zip(&staged).zip(out.iter_mut()) {
                *slot = match *ids {
                    Some(ids) => self.resolve(ids),
                    None => self.classify_fallback(key),
                };
            }
        }
    }

    fn memory_bytes(&self) -> usize {
        let origins: usize = self
            .fallback
            .iter()
            .filter_map(|(_, rule)| rule.origin.as_ref())
            .map(String::capacity)
            .sum();
        std::mem::size_of::<Self>()
            + self.src.memory_bytes()
            + self.dst.memory_bytes()
            + self.src_port.memory_bytes()
            + self.dst_port.memory_bytes()
            + self.proto.memory_bytes()
            + self.rule_index.capacity() * 4
            + self.fallback.capacity() * std::mem::size_of::<(u32, Rule)>()
            + origins
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ferrule_dataplane::acl::{Action, Proto, RuleField};
    use std::net::Ipv4Addr;

    fn key(dst: [u8; 4], proto: u8, dst_port: u16) -> FlowKey {
        FlowKey::v4(
            0,
            proto,
            Ipv4Addr::new(10, 0, 0, 1),
            Ipv4Addr::from(dst),
            1234,
            dst_port,
        )
    }

    #[test]
    fn first_match_wins() {
        let mut web = Rule::any(Action::Permit);
        web.proto = Proto::TCP;
        web.dst_port = PortRange::single(80);
        let mut net = Rule::any(Action::Deny);
        net.dst = Prefix::parse("10.0.0.0/8", RuleField::Dst).unwrap();
        let classifier = BitVectorClassifier::new(&[web, net]).unwrap();
        assert_eq!(classifier.classify(&key([10, 0, 0, 2], 6, 80)), Some(0));
        assert_eq!(classifier.classify(&key([11, 0, 0, 2], 6, 80)), Some(0));
        assert_eq!(classifier.classify(&key([10, 0, 0, 2], 17, 80)), Some(1));
        assert_eq!(classifier.classify(&key([11, 0, 0, 2], 17, 80)), None);
    }

    #[test]
    fn empty_rule_set_matches_nothing() {
        let classifier = BitVectorClassifier::new(&[]).unwrap();
        let mut out = [0u32; 1];
        classifier.classify_batch(&[key([1, 2, 3, 4], 6, 80)], &mut out);
        assert_eq!(out, [NO_MATCH]);
    }
}
