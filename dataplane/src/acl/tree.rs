//! The decision-tree classifier [`DecisionTreeClassifier`]: the compiled ACL lookup the
//! data path uses ([`super::Compiled`]). It owns the rule partitioning, the tree build
//! with its memory budget, and the burst lookup.
//!
//! # Geometry
//!
//! Every rule is a box in a space of `u32` fields. IPv4: source address, destination
//! address, source port, destination port, protocol (5 dimensions). IPv6: the four
//! 32-bit words of the source address, the four of the destination, the two ports and
//! the protocol (11 dimensions); a prefix is the product of one range per word (whole
//! words, one prefix-range word, then wildcard words), so it is a box too. The
//! protocol dimension is a value/mask set rather than a range: it is cut through its
//! hull and tested exactly. Rules whose prefixes are both IPv4 or any go into the IPv4
//! space, rules whose prefixes are both IPv6 or any into the IPv6 space (a rule with
//! both prefixes any is in both), and a key is looked up in its family's space only,
//! so a prefix of one family never meets a key of the other.
//!
//! # Build
//!
//! 1. *Partition* (EffiCuts / CutSplit): the rules of a family are split by whether
//!    their source and their destination prefix is small (at most 16 bits shorter than
//!    the longest prefix of that field in the family; any is never small) into four
//!    sets, one tree each, so rules wide in an address do not get replicated across
//!    the cuts of rules that are narrow in it.
//! 2. *Cut* (HiCuts with bit-window cuts): a node covers, per dimension, the values
//!    with some bits fixed (a value/known-bits pattern). Rules the node's values miss
//!    are dropped and the list is truncated after the first rule holding all of them
//!    (nothing after it can win). A list of at most `binth` rules becomes a leaf.
//!    Otherwise the node cuts one dimension on a window of `k` consecutive bits into
//!    `2^k` children (`k` at most [`MAX_CUT_BITS`]); windows are tried in every
//!    dimension, ending at every 4th (2nd, every) bit at or below the highest bit where
//!    the rules differ, so a cut takes the bits that separate the rules rather than the
//!    top ones. Per window, `k` is the largest keeping `2^k` plus the rules replicated
//!    into the children within `spfac` times the rules (at least `2^8`, `2^16` at a
//!    root but at most 64 per rule), and the window whose children expect the fewest
//!    rules per lookup (the sum of squared child sizes over their sum) wins, if it
//!    expects at least a sixteenth fewer than the node has; else the node is a leaf.
//!    A node of more than `CHOOSE_SAMPLE` rules weighs the windows on an evenly
//!    spaced sample of that many, its counts scaled up (the build's hot spot).
//!    A rule goes into every child its range may reach (a superset for patterns with
//!    holes, harmless as leaves test rules whole). Adjacent children with the same
//!    rules, all holding both children whole in the cut dimension, share a subtree;
//!    identical leaves are stored once per tree.
//! 3. *Budget*: a tree whose nodes and leaves outgrow its budget (1 MiB plus 16 leaf
//!    records per rule) is rebuilt with bigger leaves and less replication, and in
//!    the end as one linear leaf, so memory stays linear in the rules and the build
//!    always ends; the classifier is refused ([`ClassifierError::TooLarge`]) only past
//!    [`MAX_BYTES`].
//!
//! Nodes are `u64` child references in one flat array per family, a node's `2^k`
//! children contiguous. An inner reference holds its children's offset (bits 0-31),
//! the cut dimension (32-35), the window's lowest bit (40-44) and the child mask
//! (48-63); a leaf reference has bit 39 set, the position of its first record in bits
//! 0-31 (bits 32-38 clear) and the index of its first rule in bits 40-63 (saturated at
//! 2^24 - 1, so a lower bound; the empty leaf holds that maximum).
//! A leaf's records are contiguous, in priority order, the last one flagged.
//!
//! # Lookup
//!
//! A key becomes its family's field values. The trees are visited in order of the
//! first rule they hold, and a tree whose first rule is not before a key's best match
//! so far is skipped for that key. In a tree every step is one shift, one mask and one
//! load. A leaf whose first rule (in its reference) is not before the key's best match
//! is left without reading its records; otherwise the records are checked in order (a
//! wrapping subtraction and one compare per range, vectorised over the four ranges of
//! an IPv4 record, a masked compare for the protocol) until one matches, one is not
//! before the best match, or the leaf ends. A burst of up to 32 keys goes through each
//! tree together: all keys take a step, then those not yet at a leaf another, and so
//! on, with the list of keys still walking compacted without branches; then every key
//! checks the first two records of its leaf in one pass, and the few that need more
//! finish their leaf one key at a time (its records are contiguous and by then mostly
//! in cache; a round per record over all of them cost more than it overlapped).
//! Independent keys thus overlap their cache misses.

use super::rule::{Prefix, Proto, Rule};
use super::{Classifier, ClassifierError, FlowKey, NO_MATCH};
use crate::flow::Family;
use crate::wire::IpCidr;
use rustc_hash::FxHashMap;

/// The most memory a built classifier may hold; a rule set needing more is refused.
pub const MAX_BYTES: usize = 1 << 30;

/// The most bits one cut takes from a dimension (`2^16` children).
pub const MAX_CUT_BITS: u32 = 16;

/// Cuts below a root past which a node becomes a leaf whatever its size.
const MAX_DEPTH: usize = 48;

/// Children a cut may always make (as bits), whatever the node's rule count.
const MIN_ROOM_BITS: u32 = 8;
/// The same for a root, up to 64 children per rule: one wide first cut costs little
/// memory and saves a level.
const ROOT_ROOM_BITS: u32 = 16;

/// Past this many rules a node weighs its candidate cuts on an evenly spaced sample of
/// this many (the counts scaled up): the windows' rule counts are what the choice
/// compares, and a sample estimates them closely at a fraction of the build time.
const CHOOSE_SAMPLE: usize = 1024;

/// Rule partitions per family, one tree each.
const PARTITIONS: usize = 4;

/// Dimensions of the IPv4 space: src, dst, src port, dst port, protocol.
const V4: usize = 5;
/// Dimensions of the IPv6 space: 4 src words, 4 dst words, src port, dst port, protocol.
const V6: usize = 11;
const V4_WIDTHS: [u8; V4] = [32, 32, 16, 16, 8];
const V6_WIDTHS: [u8; V6] = [32, 32, 32, 32, 32, 32, 32, 32, 16, 16, 8];

/// Set on the index of a leaf's last record.
const LAST: u32 = 1 << 31;
/// "No rule" inside the lookup: after every rule index, and not [`NO_MATCH`] so that
/// [`LAST`] can share the index word.
const NONE: u32 = LAST - 1;

/// Child reference tag of a leaf; the low 32 bits are then its first record.
const LEAF: u64 = 1 << 39;
/// A leaf reference's record bits.
const RECORD: u64 = 0xFFFF_FFFF;
/// Where a leaf reference keeps its first rule's index (bits 40-63), saturated at
/// [`FIRST_MAX`]: a lower bound, so a key whose best match is before it, or is it,
/// leaves the leaf without reading its records.
const FIRST_SHIFT: u32 = 40;
/// The largest first rule a leaf reference holds (also the empty leaf's).
const FIRST_MAX: u32 = (1 << 24) - 1;
/// The reference of the empty leaf: record 0, which no key matches.
const EMPTY_LEAF: u64 = leaf_reference(0, FIRST_MAX);
/// Keys walked down the trees together.
const BURST: usize = 32;

/// Leaf size and replication factor of the successive build attempts of one tree; the
/// last attempt is one linear leaf.
const ATTEMPTS: [(usize, usize); 4] = [(8, 12), (16, 4), (32, 2), (64, 1)];

/// A rule's box: dimensions `0..N-1` are inclusive ranges `lo..=hi`, dimension `N-1`
/// (the protocol) is the value/mask set `p & hi == lo` (`lo` already masked).
#[derive(Debug, Clone, Copy)]
struct RuleBox<const N: usize> {
    lo: [u32; N],
    hi: [u32; N],
    index: u32,
}

/// The reference of a leaf whose records start at `at` and whose first rule is
/// `first_rule`.
const fn leaf_reference(at: u64, first_rule: u32) -> u64 {
    let first = if first_rule < FIRST_MAX {
        first_rule
    } else {
        FIRST_MAX
    };
    LEAF | at | (first as u64) << FIRST_SHIFT
}

/// A lower bound on the first rule of the leaf `reference`.
fn leaf_first(reference: u64) -> u32 {
    (reference >> FIRST_SHIFT) as u32
}

/// The low `bits` bits set (`bits` at most 32).
fn low_bits(bits: u32) -> u32 {
    (((1u64) << bits) - 1) as u32
}

/// The values of one dimension a node covers: those `v` of the dimension's width with
/// `v & known == value` (`value` has no bits outside `known`).
#[derive(Debug, Clone, Copy)]
struct Pattern {
    value: u32,
    known: u32,
}

/// How the values of a dimension a rule holds fall on the children of a cut.
enum Children {
    /// On every child.
    All,
    /// On children `first..=last`, wrapping past the last child to 0 when
    /// `first > last`.
    Run(u32, u32),
    /// On none: the rule holds no value of the node.
    None,
}

impl<const N: usize> RuleBox<N> {
    /// The rule's hull in dimension `d`: its range, or for the protocol the smallest
    /// range holding its value/mask set.
    fn hull(&self, d: usize) -> (u32, u32) {
        if d == N - 1 {
            (self.lo[d], self.lo[d] | (!self.hi[d] & 0xFF))
        } else {
            (self.lo[d], self.hi[d])
        }
    }

    /// The hull clipped to the smallest range holding `pattern` (of dimension width
    /// `width`), or `None` when they are disjoint.
    fn clipped(&self, d: usize, pattern: Pattern, width: u32) -> Option<(u32, u32)> {
        let (lo, hi) = self.hull(d);
        let (min, max) = (
            pattern.value,
            pattern.value | (!pattern.known & low_bits(width)),
        );
        let (lo, hi) = (lo.max(min), hi.min(max));
        (lo <= hi).then_some((lo, hi))
    }

    /// Whether the rule holds every value of `pattern` in dimension `d`.
    fn holds(&self, d: usize, pattern: Pattern, width: u32) -> bool {
        let unknown = !pattern.known & low_bits(width);
        if d == N - 1 {
            self.hi[d] & unknown == 0 && (pattern.value ^ self.lo[d]) & self.hi[d] == 0
        } else {
            self.lo[d] <= pattern.value && self.hi[d] >= pattern.value | unknown
        }
    }

    /// Whether the protocol set of the rule meets `pattern` (exact).
    fn meets_proto(&self, pattern: Pattern) -> bool {
        (self.lo[N - 1] ^ pattern.value) & self.hi[N - 1] & pattern.known == 0
    }

    /// The children of the cut on bits `shift .. shift + bits` of dimension `d` that
    /// the rule may meet, for a node covering `pattern` (a superset for the protocol).
    fn children(&self, d: usize, pattern: Pattern, width: u32, shift: u32, bits: u32) -> Children {
        match self.clipped(d, pattern, width) {
            None => Children::None,
            Some((lo, hi)) => window(lo >> shift, hi >> shift, bits),
        }
    }
}

/// How `spans` (values shifted down by `drop` bits more) spread over the `2^bits`
/// children of a cut: the sum of the squared rule counts of the children and the sum
/// of the counts. Counted per child when the children are few, else by sweeping the
/// sorted span ends.
fn spread(
    spans: &[(u32, u32)],
    drop: u32,
    bits: u32,
    diff: &mut Vec<i64>,
    events: &mut Vec<(u32, i64)>,
) -> (u64, u64) {
    let count = 1u32 << bits;
    let mut everywhere = 0i64;
    let mut total = 0u64;
    diff.clear();
    events.clear();
    let per_child = count as usize <= 2 * spans.len() + 16;
    if per_child {
        diff.resize(count as usize + 1, 0);
    }
    let mut add = |at: u32, delta: i64| {
        if per_child {
            diff[at as usize] += delta;
        } else {
            events.push((at, delta));
        }
    };
    for &(lo, hi) in spans {
        match window(lo >> drop, hi >> drop, bits) {
            Children::All => {
                everywhere += 1;
                total += u64::from(count);
            }
            Children::Run(first, last) => {
                add(first, 1);
                add(last + 1, -1);
                if first > last {
                    add(0, 1);
                    add(count, -1);
                    total += u64::from(count - first + last + 1);
                } else {
                    total += u64::from(last - first + 1);
                }
            }
            Children::None => {}
        }
    }
    let mut sumsq = 0u64;
    let mut running = everywhere;
    if per_child {
        for &delta in &diff[..count as usize] {
            running += delta;
            sumsq += (running * running) as u64;
        }
    } else {
        events.sort_unstable_by_key(|&(at, _)| at);
        let mut at = 0;
        for &(next, delta) in events.iter() {
            sumsq += (running * running) as u64 * u64::from(next - at);
            running += delta;
            at = next;
        }
        sumsq += (running * running) as u64 * u64::from(count - at);
    }
    (sumsq, total)
}

/// The children of a `bits`-bit cut that values `lo..=hi` (already shifted down to
/// the cut's lowest bit) fall on.
fn window(lo: u32, hi: u32, bits: u32) -> Children {
    let mask = low_bits(bits);
    if hi - lo >= mask {
        Children::All
    } else {
        Children::Run(lo & mask, hi & mask)
    }
}

/// A rule as a leaf stores it, for a space of `R` range dimensions (address words
/// then ports) and the protocol. A key is inside when `key - lo <= span` (wrapping)
/// in every range dimension and `(key ^ value) & mask == 0` for the protocol.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Record<const R: usize> {
    /// Lowest value of each range.
    lo: [u32; R],
    /// Width of each range, less one.
    span: [u32; R],
    /// Protocol value in bits 0-7, mask in bits 8-15.
    proto: u32,
    /// The rule index ([`NONE`] for the empty leaf), with [`LAST`] set on a leaf's
    /// last record.
    index: u32,
}

impl<const R: usize> Record<R> {
    /// The empty leaf: a record no key gets to match, as its index is never before
    /// the best match.
    const EMPTY: Self = Self {
        lo: [0; R],
        span: [0; R],
        proto: 0,
        index: NONE | LAST,
    };

    /// The record of a rule of `N = R + 1` dimensions.
    fn of<const N: usize>(rule: &RuleBox<N>) -> Self {
        let mut record = Self {
            index: rule.index,
            proto: rule.lo[R] | rule.hi[R] << 8,
            ..Self::EMPTY
        };
        for d in 0..R {
            record.lo[d] = rule.lo[d];
            record.span[d] = rule.hi[d] - rule.lo[d];
        }
        record
    }

    #[inline(always)]
    fn matches<const K: usize>(&self, key: &[u32; K]) -> bool {
        let mut outside = (key[R] ^ self.proto) & (self.proto >> 8) != 0;
        for ((&value, &lo), &span) in key.iter().zip(&self.lo).zip(&self.span) {
            outside |= value.wrapping_sub(lo) > span;
        }
        !outside
    }
}

/// One tree of a forest.
#[derive(Debug, Clone, Copy)]
struct Tree {
    /// The root's reference.
    root: u64,
    /// The lowest rule index in the tree.
    first_rule: u32,
}

/// The trees of one address family, over shared node and record arrays.
#[derive(Debug)]
struct Forest<const N: usize, const R: usize, const K: usize> {
    /// In ascending `first_rule` order.
    trees: Vec<Tree>,
    /// Child references, a node's `2^k` children contiguous.
    nodes: Vec<u64>,
    /// Leaf rule records, a leaf's last one flagged [`LAST`]; record 0 is the empty
    /// leaf, and a spare empty record ends the array.
    records: Vec<Record<R>>,
}

/// A build attempt outgrew its budget.
#[derive(Debug)]
struct Overflow;

/// Builds the trees of one forest.
struct Builder<'a, const N: usize, const R: usize> {
    rules: &'a [RuleBox<N>],
    widths: [u8; N],
    binth: usize,
    spfac: usize,
    /// The most bytes `nodes` and `records` may reach in this attempt.
    limit: usize,
    nodes: Vec<u64>,
    records: Vec<Record<R>>,
    leaves: FxHashMap<Vec<u32>, u64>,
}

impl<const N: usize, const R: usize> Builder<'_, N, R> {
    fn bytes(&self) -> usize {
        self.nodes.len() * 8 + self.records.len() * std::mem::size_of::<Record<R>>()
    }

    /// The reference of a leaf holding `list` (rule positions in `rules`).
    fn leaf(&mut self, list: &[u32]) -> Result<u64, Overflow> {
        if list.is_empty() {
            return Ok(EMPTY_LEAF);
        }
        if let Some(&at) = self.leaves.get(list) {
            return Ok(at);
        }
        let at = u64::try_from(self.records.len())
            .ok()
            .filter(|&at| at <= RECORD)
            .ok_or(Overflow)?;
        let rules = self.rules;
        self.records
            .extend(list.iter().map(|&r| Record::of(&rules[r as usize])));
        if let Some(last) = self.records.last_mut() {
            last.index |= LAST;
        }
        if self.bytes() > self.limit {
            return Err(Overflow);
        }
        let reference = leaf_reference(at, rules[list[0] as usize].index);
        self.leaves.insert(list.to_vec(), reference);
        Ok(reference)
    }

    /// The best cut of a node holding `list` over `region`: the dimension, the
    /// cut's lowest bit and its bit count, or `None` when no cut separates anything.
    ///
    /// Every dimension is tried with windows of `k` bits ending at each `top` (a
    /// multiple of 4, 2 or 1 bits by width), so a cut can take the bits where the
    /// rules differ rather than the region's top bits.
    fn choose(
        &self,
        list: &[u32],
        region: &[Pattern; N],
        depth: usize,
    ) -> Option<(usize, u32, u32)> {
        let n = list.len();
        let floor = if depth == 0 {
            (1 << ROOT_ROOM_BITS).min(64 * n)
        } else {
            1 << MIN_ROOM_BITS
        };
        let room = (self.spfac * n).max(floor);
        let room_bits = usize::BITS - 1 - room.leading_zeros();
        // Counts over `sample` times n / sampled estimate those over `list`.
        let sample: Vec<u32> = if n > CHOOSE_SAMPLE {
            let stride = n.div_ceil(CHOOSE_SAMPLE);
            list.iter().step_by(stride).copied().collect()
        } else {
            list.to_vec()
        };
        let (scale_num, scale_den) = (n as u64, sample.len().max(1) as u64);
        // (score: expected rules met, scaled by 2^20; memory cost; dimension; shift; bits)
        let mut best: Option<(u64, u64, usize, u32, u32)> = None;
        let mut spans: Vec<(u32, u32)> = Vec::with_capacity(n);
        let mut diff: Vec<i64> = Vec::new();
        let mut events: Vec<(u32, i64)> = Vec::new();
        for (d, &pattern) in region.iter().enumerate() {
            let width = u32::from(self.widths[d]);
            let unknown = !pattern.known & low_bits(width);
            if unknown == 0 {
                continue;
            }
            // Bits above the highest one where the rules' spans differ cannot
            // separate them: windows end at or below it.
            let mut first = None;
            let mut differ = 0u32;
            for &r in list {
                if let Some((lo, hi)) = self.rules[r as usize].clipped(d, pattern, width) {
                    let (lo0, hi0) = *first.get_or_insert((lo, hi));
                    differ |= (lo ^ lo0) | (hi ^ hi0);
                }
            }
            let step = (width / 8).max(1);
            let mut top = (u32::BITS - differ.leading_zeros()).div_ceil(step) * step;
            while top > 0 {
                let kmax = top.min(MAX_CUT_BITS).min(room_bits).max(1);
                let base_shift = top - kmax;
                spans.clear();
                for &r in &sample {
                    if let Some((lo, hi)) = self.rules[r as usize].clipped(d, pattern, width) {
                        spans.push((lo >> base_shift, hi >> base_shift));
                    }
                }
                // Children met by the spans at `k` bits: (total, rules on every child).
                let total = |k: u32| {
                    let count = 1u64 << k;
                    spans.iter().fold(0u64, |total, &(lo, hi)| {
                        total
                            + match window(lo >> (kmax - k), hi >> (kmax - k), k) {
                                Children::All => count,
                                Children::Run(first, last) if first > last => {
                                    count - u64::from(first) + u64::from(last) + 1
                                }
                                Children::Run(first, last) => u64::from(last - first) + 1,
                                Children::None => 0,
                            }
                    })
                };
                // The most bits within room (the memory cost grows with them): one
                // bit always, then a binary search.
                let (mut lo, mut hi) = (1, kmax);
                while lo < hi {
                    let mid = (lo + hi).div_ceil(2);
                    if total(mid) * scale_num / scale_den + (1u64 << mid) <= room as u64 {
                        lo = mid;
                    } else {
                        hi = mid - 1;
                    }
                }
                let k = lo;
                let shift = top - k;
                if low_bits(k) << shift & unknown != 0 {
                    let (sumsq, total) = spread(&spans, kmax - k, k, &mut diff, &mut events);
                    let cost = total * scale_num / scale_den + (1u64 << k);
                    let score = (sumsq << 20) / total.max(1) * scale_num / scale_den;
                    if !matches!(best, Some(b) if (b.0, b.1) <= (score, cost)) {
                        best = Some((score, cost, d, shift, k));
                    }
                }
                top = top.saturating_sub(step);
            }
        }
        let (score, _, d, shift, k) = best?;
        // Progress: a lookup must expect to meet at least a sixteenth fewer rules
        // than here, or wide rules would be replicated for nothing.
        (score < ((n as u64) << 20) / 16 * 15).then_some((d, shift, k))
    }

    /// Builds the subtree of `list` (rule positions, ascending) over `region`, `depth`
    /// cuts below the root, and returns its reference.
    fn node(
        &mut self,
        mut list: Vec<u32>,
        region: [Pattern; N],
        depth: usize,
    ) -> Result<u64, Overflow> {
        let rules = self.rules;
        let widths = self.widths.map(u32::from);
        // Drop rules the region excludes (their hull misses it, or the protocol set
        // does), then everything after the first rule holding the whole region.
        list.retain(|&r| {
            let rule = &rules[r as usize];
            rule.meets_proto(region[N - 1])
                && (0..N).all(|d| rule.clipped(d, region[d], widths[d]).is_some())
        });
        let holds_all = |r: u32| (0..N).all(|d| rules[r as usize].holds(d, region[d], widths[d]));
        if let Some(first) = list.iter().position(|&r| holds_all(r)) {
            list.truncate(first + 1);
        }
        if list.len() <= self.binth || depth >= MAX_DEPTH {
            return self.leaf(&list);
        }
        let Some((d, shift, k)) = self.choose(&list, &region, depth) else {
            return self.leaf(&list);
        };
        let count = 1usize << k;
        let window_mask = low_bits(k) << shift;
        let child_pattern = |c: usize| Pattern {
            value: (region[d].value & !window_mask) | ((c as u32) << shift),
            known: region[d].known | window_mask,
        };
        // A child whose window bits contradict the region's known bits is unreachable.
        let reachable =
            |c: usize| ((c as u32) << shift ^ region[d].value) & region[d].known & window_mask == 0;

        // The children's lists, flat: `offsets[c]..offsets[c + 1]` of `members`.
        let mut offsets = vec![0u32; count + 1];
        let mut runs = Vec::with_capacity(list.len());
        for &r in &list {
            runs.push(rules[r as usize].children(d, region[d], widths[d], shift, k));
        }
        // Calls `f` with every child of a run.
        let each = |run: &Children, f: &mut dyn FnMut(usize)| match *run {
            Children::All => (0..count).for_each(f),
            Children::Run(first, last) if first <= last => {
                (first as usize..=last as usize).for_each(f);
            }
            Children::Run(first, last) => {
                (first as usize..count).chain(0..=last as usize).for_each(f);
            }
            Children::None => {}
        };
        for (&r, run) in list.iter().zip(&runs) {
            let rule = &rules[r as usize];
            each(run, &mut |c| {
                if reachable(c) && (d != N - 1 || rule.meets_proto(child_pattern(c))) {
                    offsets[c + 1] += 1;
                }
            });
        }
        for c in 0..count {
            offsets[c + 1] += offsets[c];
        }
        let mut members = vec![0u32; offsets[count] as usize];
        let mut fill = offsets.clone();
        // Children where some member does not hold the whole child in `d`.
        let mut partial = vec![false; count];
        for (&r, run) in list.iter().zip(&runs) {
            let rule = &rules[r as usize];
            each(run, &mut |c| {
                let pattern = child_pattern(c);
                if reachable(c) && (d != N - 1 || rule.meets_proto(pattern)) {
                    partial[c] |= !rule.holds(d, pattern, widths[d]);
                    members[fill[c] as usize] = r;
                    fill[c] += 1;
                }
            });
        }
        drop(list);

        let at = self.nodes.len();
        if self.bytes() + count * 8 > self.limit || at + count > RECORD as usize {
            return Err(Overflow);
        }
        self.nodes.resize(at + count, EMPTY_LEAF);
        for c in 0..count {
            let list = &members[offsets[c] as usize..offsets[c + 1] as usize];
            let reference = if c > 0
                && !partial[c]
                && !partial[c - 1]
                && list == &members[offsets[c - 1] as usize..offsets[c] as usize]
            {
                self.nodes[at + c - 1]
            } else if list.is_empty() {
                EMPTY_LEAF
            } else {
                let mut child = region;
                child[d] = child_pattern(c);
                self.node(list.to_vec(), child, depth + 1)?
            };
            self.nodes[at + c] = reference;
        }
        Ok(at as u64 | (d as u64) << 32 | u64::from(shift) << 40 | ((count - 1) as u64) << 48)
    }
}

impl<const N: usize, const R: usize, const K: usize> Forest<N, R, K> {
    /// Builds one tree per non-empty partition of `rules` (in priority order).
    fn build(
        rules: &[RuleBox<N>],
        partitions: Vec<Vec<u32>>,
        widths: [u8; N],
    ) -> Result<Self, ClassifierError> {
        let mut nodes = Vec::new();
        let mut records = vec![Record::EMPTY];
        let mut trees = Vec::new();
        for list in partitions.into_iter().filter(|list| !list.is_empty()) {
            let first_rule = rules[list[0] as usize].index;
            // Budget: generous per rule, so only replication blow-ups hit it.
            let budget = (1 << 20) + list.len() * 16 * std::mem::size_of::<Record<R>>();
            let mut root = None;
            for &(binth, spfac) in &ATTEMPTS {
                let mut builder = Builder {
                    rules,
                    widths,
                    binth,
                    spfac,
                    limit: (nodes.len() * 8 + records.len() * std::mem::size_of::<Record<R>>())
                        .saturating_add(budget),
                    nodes: std::mem::take(&mut nodes),
                    records: std::mem::take(&mut records),
                    leaves: FxHashMap::default(),
                };
                let (node_mark, record_mark) = (builder.nodes.len(), builder.records.len());
                let result = builder.node(list.clone(), [Pattern { value: 0, known: 0 }; N], 0);
                nodes = builder.nodes;
                records = builder.records;
                match result {
                    Ok(reference) => {
                        root = Some(reference);
                        break;
                    }
                    Err(Overflow) => {
                        nodes.truncate(node_mark);
                        records.truncate(record_mark);
                    }
                }
            }
            let root = match root {
                Some(root) => root,
                None => {
                    // One linear leaf.
                    let at = records.len();
                    records.extend(list.iter().map(|&r| Record::of(&rules[r as usize])));
                    if let Some(last) = records.last_mut() {
                        last.index |= LAST;
                    }
                    leaf_reference(u64::try_from(at).map_err(|_| too_large())?, first_rule)
                }
            };
            let bytes = nodes.len() * 8 + records.len() * std::mem::size_of::<Record<R>>();
            if bytes > MAX_BYTES || records.len() > RECORD as usize {
                return Err(too_large());
            }
            trees.push(Tree { root, first_rule });
        }
        trees.sort_by_key(|tree| tree.first_rule);
        nodes.shrink_to_fit();
        // A spare empty record, so every leaf's second record exists.
        records.push(Record::EMPTY);
        records.shrink_to_fit();
        Ok(Self {
            trees,
            nodes,
            records,
        })
    }

    /// The reference of the leaf `key` reaches from `reference`.
    #[inline(always)]
    fn descend(&self, mut reference: u64, key: &[u32; K]) -> u64 {
        while reference & LEAF == 0 {
            reference = self.step(reference, key);
        }
        reference
    }

    /// The child of inner node `reference` that `key` falls in: the reference holds the
    /// children's offset (bits 0-31), the dimension (32-35), the shift (40-44) and the
    /// child index mask (48-63).
    #[inline(always)]
    fn step(&self, reference: u64, key: &[u32; K]) -> u64 {
        let value = key[(reference >> 32) as usize % K];
        let index = (value >> ((reference >> 40) & 0x1F)) & (reference >> 48) as u32;
        self.nodes[(reference & RECORD) as usize + index as usize]
    }

    /// The first rule of the leaf at record `at` matching `key` that is before `best`,
    /// else `best`.
    #[inline(always)]
    fn scan(&self, at: usize, key: &[u32; K], best: u32) -> u32 {
        for record in &self.records[at..] {
            let index = record.index & NONE;
            if index >= best {
                return best;
            }
            if record.matches(key) {
                return index;
            }
            if record.index & LAST != 0 {
                break;
            }
        }
        best
    }

    /// The first rule matching `key`, or [`NO_MATCH`].
    fn classify(&self, key: &[u32; K]) -> u32 {
        let mut best = NONE;
        for tree in &self.trees {
            if tree.first_rule >= best {
                break;
            }
            let leaf = self.descend(tree.root, key);
            if leaf_first(leaf) < best {
                best = self.scan((leaf & RECORD) as usize, key, best);
            }
        }
        if best == NONE {
            NO_MATCH
        } else {
            best
        }
    }

    /// Classifies the first `n` of `keys` into `out`: every tree is walked by all keys
    /// that may still improve on it, level by level, then its leaves are scanned, so
    /// the keys' cache misses overlap; the keys still walking are kept in a list
    /// compacted every round without branching, and a key whose leaf needs more than
    /// its first two records finishes it alone.
    fn classify_burst(&self, keys: &[[u32; K]; BURST], n: usize, out: &mut [u32; BURST]) {
        let n = n.min(BURST);
        out.fill(NONE);
        let mut cursor = [0u64; BURST];
        let mut taking = [0u8; BURST];
        let mut active = [0u8; BURST];
        let mut worst = NONE;
        for tree in &self.trees {
            if tree.first_rule >= worst {
                break;
            }
            let mut taken = 0;
            for (index, best) in out[..n].iter().enumerate() {
                taking[taken % BURST] = index as u8;
                taken += usize::from(tree.first_rule < *best);
            }
            let mut count = 0;
            if tree.root & LEAF == 0 {
                for &index in &taking[..taken] {
                    let index = usize::from(index) % BURST;
                    let reference = self.step(tree.root, &keys[index]);
                    cursor[index] = reference;
                    active[count % BURST] = index as u8;
                    count += usize::from(reference & LEAF == 0);
                }
            } else {
                for &index in &taking[..taken] {
                    cursor[usize::from(index) % BURST] = tree.root;
                }
            }
            while count > 0 {
                let mut next = 0;
                for j in 0..count {
                    let index = usize::from(active[j % BURST]) % BURST;
                    let reference = self.step(cursor[index], &keys[index]);
                    cursor[index] = reference;
                    active[next % BURST] = index as u8;
                    next += usize::from(reference & LEAF == 0);
                }
                count = next;
            }
            // A key skips a leaf whose first rule is not before its best match (the
            // leaf's reference says so: no record read), and otherwise leaves the scan
            // at its first record that matches or is not before its best match. The
            // first two records of every leaf are checked in one pass (the records end
            // with a spare empty one, so the second always exists); a key that needs
            // more finishes its leaf alone.
            let mut count = 0;
            for &index in &taking[..taken] {
                let index = usize::from(index) % BURST;
                let best = out[index];
                if leaf_first(cursor[index]) >= best {
                    continue;
                }
                let at = (cursor[index] & RECORD) as usize;
                let pair = &self.records[at..at + 2];
                let key = &keys[index];
                let first = pair[0].index & NONE;
                let first_before = first < best;
                let first_hit = first_before & pair[0].matches(key);
                let on = first_before & !first_hit & (pair[0].index & LAST == 0);
                let second = pair[1].index & NONE;
                let second_before = on & (second < best);
                let second_hit = second_before & pair[1].matches(key);
                out[index] = if first_hit {
                    first
                } else if second_hit {
                    second
                } else {
                    best
                };
                cursor[index] = at as u64 + 2;
                active[count % BURST] = index as u8;
                count += usize::from(second_before & !second_hit & (pair[1].index & LAST == 0));
            }
            for &index in &active[..count] {
                let index = usize::from(index) % BURST;
                let at = (cursor[index] & RECORD) as usize;
                out[index] = self.scan(at, &keys[index], out[index]);
            }
            worst = out[..n].iter().copied().max().unwrap_or(0);
        }
        for best in out.iter_mut() {
            if *best == NONE {
                *best = NO_MATCH;
            }
        }
    }

    fn memory_bytes(&self) -> usize {
        self.trees.capacity() * std::mem::size_of::<Tree>()
            + self.nodes.capacity() * 8
            + self.records.capacity() * std::mem::size_of::<Record<R>>()
    }
}

fn too_large() -> ClassifierError {
    ClassifierError::TooLarge {
        field: "decision tree",
        limit: MAX_BYTES,
    }
}

/// An IPv4 prefix (or any) as a range of host-order addresses.
fn v4_range(prefix: &Prefix) -> (u32, u32) {
    prefix.v4_range().unwrap_or((0, u32::MAX))
}

/// An IPv6 prefix (or any) as four ranges, one per 32-bit word, most significant first.
fn v6_ranges(prefix: &Prefix) -> [(u32, u32); 4] {
    let mut ranges = [(0, u32::MAX); 4];
    if let Some((lo, hi)) = prefix.v6_range() {
        for (word, range) in ranges.iter_mut().enumerate() {
            let shift = 96 - 32 * word;
            *range = ((lo >> shift) as u32, (hi >> shift) as u32);
        }
    }
    ranges
}

/// The protocol set as value (masked) and mask.
fn proto_value_mask(proto: Proto) -> (u32, u32) {
    match proto {
        Proto::Any => (0, 0),
        Proto::Number(number) => (u32::from(number), 0xFF),
        Proto::Masked { value, mask } => (u32::from(value & mask), u32::from(mask)),
    }
}

/// The prefix length of `prefix` (`None` for any).
fn prefix_len(prefix: &Prefix) -> Option<u8> {
    prefix.cidr().map(|cidr| cidr.prefix_len())
}

/// Whether `prefix` is small: at most 16 bits shorter than the longest prefix of its
/// field in the family (`longest`), so a cut on that field separates such rules.
fn small_prefix(prefix: &Prefix, longest: u8) -> bool {
    prefix_len(prefix).is_some_and(|len| len + 16 >= longest && len > 0)
}

/// The partition of a rule (see the module documentation), given the longest source
/// and destination prefixes of its family.
fn partition(rule: &Rule, longest: (u8, u8)) -> usize {
    match (
        small_prefix(&rule.src, longest.0),
        small_prefix(&rule.dst, longest.1),
    ) {
        (true, true) => 0,
        (true, false) => 1,
        (false, true) => 2,
        (false, false) => 3,
    }
}

/// Splits `boxes` (with their rules) into the partitions, as positions in `boxes`.
fn partitions<const N: usize>(rules: &[Rule], boxes: &[RuleBox<N>]) -> Vec<Vec<u32>> {
    let longest = |field: fn(&Rule) -> &Prefix| {
        boxes
            .iter()
            .filter_map(|rule_box| prefix_len(field(&rules[rule_box.index as usize])))
            .max()
            .unwrap_or(0)
    };
    let longest = (longest(|rule| &rule.src), longest(|rule| &rule.dst));
    let mut parts = vec![Vec::new(); PARTITIONS];
    for (position, rule_box) in boxes.iter().enumerate() {
        parts[partition(&rules[rule_box.index as usize], longest)].push(position as u32);
    }
    parts
}

/// The decision-tree classifier over one ordered rule table; first match wins. See the
/// module documentation for the structure.
#[derive(Debug)]
pub struct DecisionTreeClassifier {
    v4: Forest<V4, 4, 8>,
    v6: Forest<V6, 10, 16>,
}

impl DecisionTreeClassifier {
    /// Builds the classifier over `rules`, in priority order (index 0 first).
    pub fn new(rules: &[Rule]) -> Result<Self, ClassifierError> {
        Self::build(rules, true)
    }

    /// Builds the classifier over `rules`; without `ipv4` the IPv4 trees stay empty
    /// (another lookup serves IPv4 keys) and only IPv6 keys are classified.
    pub(super) fn build(rules: &[Rule], ipv4: bool) -> Result<Self, ClassifierError> {
        let max = NONE as usize;
        if rules.len() > max {
            return Err(ClassifierError::TooManyRules {
                rules: rules.len(),
                max,
            });
        }
        let mut v4_boxes = Vec::new();
        let mut v6_boxes = Vec::new();
        for (index, rule) in rules.iter().enumerate() {
            let index = index as u32;
            let (proto, mask) = proto_value_mask(rule.proto);
            let ports = [rule.src_port, rule.dst_port];
            let v4_capable = |p: &Prefix| matches!(p, Prefix::Any | Prefix::Cidr(IpCidr::V4(_)));
            let v6_capable = |p: &Prefix| matches!(p, Prefix::Any | Prefix::Cidr(IpCidr::V6(_)));
            if ipv4 && v4_capable(&rule.src) && v4_capable(&rule.dst) {
                let (src, dst) = (v4_range(&rule.src), v4_range(&rule.dst));
                v4_boxes.push(RuleBox {
                    lo: [src.0, dst.0, ports[0].lo.into(), ports[1].lo.into(), proto],
                    hi: [src.1, dst.1, ports[0].hi.into(), ports[1].hi.into(), mask],
                    index,
                });
            }
            if v6_capable(&rule.src) && v6_capable(&rule.dst) {
                let words: Vec<(u32, u32)> = v6_ranges(&rule.src)
                    .into_iter()
                    .chain(v6_ranges(&rule.dst))
                    .chain(ports.iter().map(|p| (u32::from(p.lo), u32::from(p.hi))))
                    .chain([(proto, mask)])
                    .collect();
                let mut rule_box = RuleBox {
                    lo: [0; V6],
                    hi: [0; V6],
                    index,
                };
                for (d, &(lo, hi)) in words.iter().enumerate() {
                    rule_box.lo[d] = lo;
                    rule_box.hi[d] = hi;
                }
                v6_boxes.push(rule_box);
            }
        }
        let v4 = Forest::build(&v4_boxes, partitions(rules, &v4_boxes), V4_WIDTHS)?;
        let v6 = Forest::build(&v6_boxes, partitions(rules, &v6_boxes), V6_WIDTHS)?;
        if v4.memory_bytes() + v6.memory_bytes() > MAX_BYTES {
            return Err(too_large());
        }
        Ok(Self { v4, v6 })
    }

    /// The index of the first rule matching `key`, if any.
    pub fn classify(&self, key: &FlowKey) -> Option<usize> {
        let result = match key.family {
            Family::V4 => self.v4.classify(&v4_key(key)),
            Family::V6 => self.v6.classify(&v6_key(key)),
        };
        (result != NO_MATCH).then_some(result as usize)
    }

    /// Classifies a burst of at most [`BURST`] keys of both families: each family's
    /// keys as a burst of their own.
    fn classify_mixed(&self, keys: &[FlowKey], out: &mut [u32]) {
        let mut v4_keys = [[0u32; 8]; BURST];
        let mut v6_keys = [[0u32; 16]; BURST];
        let mut v4_at = [0u8; BURST];
        let mut v6_at = [0u8; BURST];
        let (mut v4, mut v6) = (0, 0);
        for (index, key) in keys.iter().enumerate().take(BURST) {
            match key.family {
                Family::V4 => {
                    v4_keys[v4] = v4_key(key);
                    v4_at[v4] = index as u8;
                    v4 += 1;
                }
                Family::V6 => {
                    v6_keys[v6] = v6_key(key);
                    v6_at[v6] = index as u8;
                    v6 += 1;
                }
            }
        }
        let mut results = [0u32; BURST];
        self.v4.classify_burst(&v4_keys, v4, &mut results);
        for (&index, &result) in v4_at[..v4].iter().zip(&results) {
            out[usize::from(index)] = result;
        }
        self.v6.classify_burst(&v6_keys, v6, &mut results);
        for (&index, &result) in v6_at[..v6].iter().zip(&results) {
            out[usize::from(index)] = result;
        }
    }
}

/// The IPv4 field values of `key`.
#[inline(always)]
fn v4_key(key: &FlowKey) -> [u32; 8] {
    let mut values = [0; 8];
    values[..V4].copy_from_slice(&[
        key.src_v4(),
        key.dst_v4(),
        u32::from(key.src_port),
        u32::from(key.dst_port),
        u32::from(key.proto),
    ]);
    values
}

/// The IPv6 field values of `key`.
#[inline(always)]
fn v6_key(key: &FlowKey) -> [u32; 16] {
    let word = |bytes: &[u8; 16], w: usize| {
        u32::from_be_bytes([
            bytes[4 * w],
            bytes[4 * w + 1],
            bytes[4 * w + 2],
            bytes[4 * w + 3],
        ])
    };
    let mut values = [0; 16];
    values[..V6].copy_from_slice(&[
        word(&key.src, 0),
        word(&key.src, 1),
        word(&key.src, 2),
        word(&key.src, 3),
        word(&key.dst, 0),
        word(&key.dst, 1),
        word(&key.dst, 2),
        word(&key.dst, 3),
        u32::from(key.src_port),
        u32::from(key.dst_port),
        u32::from(key.proto),
    ]);
    values
}

impl Classifier for DecisionTreeClassifier {
    fn classify_batch(&self, keys: &[FlowKey], out: &mut [u32]) {
        assert!(out.len() >= keys.len(), "output shorter than the burst");
        let mut v4_keys = [[0u32; 8]; BURST];
        let mut results = [0u32; BURST];
        for (keys, out) in keys.chunks(BURST).zip(out.chunks_mut(BURST)) {
            let mut v4 = 0;
            for (key, values) in keys.iter().zip(v4_keys.iter_mut()) {
                *values = v4_key(key);
                v4 += usize::from(key.family == Family::V4);
            }
            if v4 == keys.len() {
                self.v4.classify_burst(&v4_keys, v4, &mut results);
                out.copy_from_slice(&results[..out.len()]);
            } else {
                self.classify_mixed(keys, out);
            }
        }
    }

    fn memory_bytes(&self) -> usize {
        std::mem::size_of::<Self>() + self.v4.memory_bytes() + self.v6.memory_bytes()
    }
}
