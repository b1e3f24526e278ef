//! Recursive flow classification (RFC, Gupta and McKeown) of IPv4 keys: the lookup
//! [`super::Compiled`] uses for an IPv4 rule set whose tables fit a memory and build
//! budget. It owns the equivalence-class build and the branch-free burst lookup.
//!
//! # Structure
//!
//! A key's IPv4 fields are cut into seven chunks: the high and low 16 bits of the source
//! and of the destination address, the source port, the destination port and the
//! protocol. A rule's prefix is exactly the product of one range per address chunk, and
//! its ports and protocol set are one range (a value/mask set) each, so a key matches a
//! rule exactly when every chunk value is inside the rule's set for that chunk.
//!
//! *Phase 0*: per chunk, the chunk's values are grouped into equivalence classes, two
//! values being equivalent when the same rules hold them; a table indexed by the value
//! gives its class (`u16`). *Phase 1*: the classes of the two source chunks are
//! combined into source classes (the rules holding both), the two destination chunks
//! into destination classes, and the ports and protocol into port classes, each through
//! a cross-product table indexed by the operands' classes. *Phase 2* combines two of
//! those three, *phase 3* the result with the third; its table holds the first rule of
//! each combination directly (or [`NO_MATCH`]). The pairing of phase 2 is chosen at
//! build time to keep the tables small.
//!
//! A lookup is thus thirteen table loads in four dependent rounds, without a branch on
//! the key; the loads of independent keys in a burst overlap.
//!
//! # Budget
//!
//! A class is the set of rules holding a value, as a bit set; classes are interned by
//! their bit sets. The cross products grow with the number of classes, which rule sets
//! with many overlapping wide ranges drive up: the build gives up (returns `None`) when
//! a class count passes `u16`, the tables pass [`MAX_BYTES`] or the bit-set work passes
//! [`MAX_BUILD_WORDS`], and the caller uses the decision trees instead.

use super::rule::{Prefix, Proto, Rule};
use super::{FlowKey, NO_MATCH};
use rustc_hash::FxHashMap;

/// The most memory the tables of one classifier may take.
pub const MAX_BYTES: usize = 16 << 20;

/// The most bit-set words the build may combine (a bound on build time: ~10 ms per
/// 2^24 words).
pub const MAX_BUILD_WORDS: u64 = 48 << 20;

/// One 16-bit chunk's class table.
type Chunk16 = Box<[u16; 1 << 16]>;

/// The interned equivalence classes of one table: bit sets over the rules.
#[derive(Debug)]
struct Classes {
    /// Words per bit set.
    words: usize,
    /// Class `c`'s bit set at `c * words`.
    bits: Vec<u64>,
    /// Class of a bit set.
    ids: FxHashMap<Box<[u64]>, u16>,
}

impl Classes {
    fn new(words: usize) -> Self {
        Self {
            words,
            bits: Vec::new(),
            ids: FxHashMap::default(),
        }
    }

    fn len(&self) -> usize {
        self.bits.len() / self.words.max(1)
    }

    fn get(&self, class: usize) -> &[u64] {
        &self.bits[class * self.words..(class + 1) * self.words]
    }

    /// The class of `set`, added if new; `None` past `u16` classes.
    fn intern(&mut self, set: &[u64]) -> Option<u16> {
        if let Some(&id) = self.ids.get(set) {
            return Some(id);
        }
        let id = u16::try_from(self.len()).ok()?;
        self.bits.extend_from_slice(set);
        self.ids.insert(set.into(), id);
        Some(id)
    }
}

/// A cross-product table: `cells[a * stride + b]` for operand classes `a` and `b`.
#[derive(Debug)]
struct Cross<T> {
    stride: usize,
    cells: Box<[T]>,
}

impl<T: Copy> Cross<T> {
    #[inline(always)]
    fn at(&self, a: u16, b: u16) -> T {
        self.cells[usize::from(a) * self.stride + usize::from(b)]
    }
}

/// Build state: the work spent so far against [`MAX_BUILD_WORDS`].
#[derive(Debug, Clone, Copy)]
struct Budget {
    words: u64,
    bytes: usize,
}

impl Budget {
    /// Charges `words` of bit-set work and `bytes` of table; `None` when over budget.
    fn charge(&mut self, words: u64, bytes: usize) -> Option<()> {
        self.words = self.words.checked_add(words)?;
        self.bytes = self.bytes.checked_add(bytes)?;
        (self.words <= MAX_BUILD_WORDS && self.bytes <= MAX_BYTES).then_some(())
    }
}

/// The RFC tables of an IPv4 rule set. See the module documentation.
#[derive(Debug)]
pub struct Rfc {
    src_hi: Chunk16,
    src_lo: Chunk16,
    dst_hi: Chunk16,
    dst_lo: Chunk16,
    sport: Chunk16,
    dport: Chunk16,
    proto: Box<[u16; 256]>,
    /// Source classes from (src_hi, src_lo).
    src: Cross<u16>,
    /// Destination classes from (dst_hi, dst_lo).
    dst: Cross<u16>,
    /// Port classes from (sport, dport), then with the protocol: `ports.at(sd, proto)`.
    port_pair: Cross<u16>,
    ports: Cross<u16>,
    /// Which phase-1 results (0 source, 1 destination, 2 ports) phase 2 combines, and
    /// which one phase 3 adds.
    order: [usize; 3],
    mid: Cross<u16>,
    last: Cross<u32>,
}

impl Rfc {
    /// Builds the tables for the IPv4 keys of `rules` (priority order); `None` when a
    /// table, the class count or the build work would pass the budget.
    pub fn new(rules: &[Rule]) -> Option<Self> {
        let words = rules.len().div_ceil(64).max(1);
        let mut budget = Budget { words: 0, bytes: 0 };
        // Per rule, its range in each chunk; rules that cannot match an IPv4 key get
        // none, so their bit is never set.
        let mut ranges: [Vec<(u32, u16, u16)>; 6] = Default::default();
        for (index, rule) in rules.iter().enumerate() {
            let (Some(src), Some(dst)) = (v4_range(&rule.src), v4_range(&rule.dst)) else {
                continue;
            };
            let index = index as u32;
            let halves = |(lo, hi): (u32, u32)| {
                [
                    ((lo >> 16) as u16, (hi >> 16) as u16),
                    (lo as u16, hi as u16),
                ]
            };
            let [src_hi, src_lo] = halves(src);
            let [dst_hi, dst_lo] = halves(dst);
            let chunks = [
                src_hi,
                src_lo,
                dst_hi,
                dst_lo,
                (rule.src_port.lo, rule.src_port.hi),
                (rule.dst_port.lo, rule.dst_port.hi),
            ];
            for (list, (lo, hi)) in ranges.iter_mut().zip(chunks) {
                list.push((index, lo, hi));
            }
        }
        // Each phase-1 table right after its operands, so a rule set that cannot fit
        // is refused before the work on the other chunks.
        let [src_hi, src_lo, dst_hi, dst_lo, sport, dport] = ranges;
        let (src_hi, src_hi_classes) = chunk16(&src_hi, words, &mut budget)?;
        let (src_lo, src_lo_classes) = chunk16(&src_lo, words, &mut budget)?;
        let (src, src_classes) = cross(&src_hi_classes, &src_lo_classes, &mut budget)?;
        let (dst_hi, dst_hi_classes) = chunk16(&dst_hi, words, &mut budget)?;
        let (dst_lo, dst_lo_classes) = chunk16(&dst_lo, words, &mut budget)?;
        let (dst, dst_classes) = cross(&dst_hi_classes, &dst_lo_classes, &mut budget)?;
        let (proto, proto_classes) = proto_chunk(rules, &sport, words, &mut budget)?;
        let (sport, sport_classes) = chunk16(&sport, words, &mut budget)?;
        let (dport, dport_classes) = chunk16(&dport, words, &mut budget)?;
        let (port_pair, pair_classes) = cross(&sport_classes, &dport_classes, &mut budget)?;
        let (ports, port_classes) = cross(&pair_classes, &proto_classes, &mut budget)?;

        // Phase 2 combines the pair with the smallest product first; if the tables
        // outgrow the budget another pairing may still fit.
        let phase1 = [&src_classes, &dst_classes, &port_classes];
        let mut orders = [[0, 1, 2], [0, 2, 1], [1, 2, 0]];
        orders.sort_by_key(|o| phase1[o[0]].len() * phase1[o[1]].len());
        let mut built = None;
        for order in orders {
            let mut attempt = budget;
            let Some((mid, mid_classes)) = cross(phase1[order[0]], phase1[order[1]], &mut attempt)
            else {
                continue;
            };
            if let Some(last) = first_rules(&mid_classes, phase1[order[2]], &mut attempt) {
                built = Some((order, mid, last));
                break;
            }
        }
        let (order, mid, last) = built?;
        Some(Self {
            src_hi,
            src_lo,
            dst_hi,
            dst_lo,
            sport,
            dport,
            proto,
            src,
            dst,
            port_pair,
            ports,
            order,
            mid,
            last,
        })
    }

    /// The index of the first rule matching the IPv4 fields, or [`NO_MATCH`].
    #[inline(always)]
    pub fn lookup(&self, src: u32, dst: u32, sport: u16, dport: u16, proto: u8) -> u32 {
        let src_class = self.src.at(
            self.src_hi[(src >> 16) as usize],
            self.src_lo[(src & 0xFFFF) as usize],
        );
        let dst_class = self.dst.at(
            self.dst_hi[(dst >> 16) as usize],
            self.dst_lo[(dst & 0xFFFF) as usize],
        );
        let pair = self.port_pair.at(
            self.sport[usize::from(sport)],
            self.dport[usize::from(dport)],
        );
        let port_class = self.ports.at(pair, self.proto[usize::from(proto)]);
        let phase1 = [src_class, dst_class, port_class];
        let mid = self.mid.at(phase1[self.order[0]], phase1[self.order[1]]);
        self.last.at(mid, phase1[self.order[2]])
    }

    /// Classifies IPv4 `keys` into `out` (`out[i]` for `keys[i]`).
    #[inline]
    pub fn classify_burst(&self, keys: &[FlowKey], out: &mut [u32]) {
        for (key, out) in keys.iter().zip(out.iter_mut()) {
            *out = self.lookup(
                key.src_v4(),
                key.dst_v4(),
                key.src_port,
                key.dst_port,
                key.proto,
            );
        }
    }

    /// Bytes of memory the tables take.
    pub fn memory_bytes(&self) -> usize {
        let cross16 = |c: &Cross<u16>| c.cells.len() * 2;
        std::mem::size_of::<Self>()
            + 6 * (1 << 16) * 2
            + 256 * 2
            + cross16(&self.src)
            + cross16(&self.dst)
            + cross16(&self.port_pair)
            + cross16(&self.ports)
            + cross16(&self.mid)
            + self.last.cells.len() * 4
    }
}

/// An IPv4 prefix (or any) as a range of host-order addresses; `None` for IPv6.
fn v4_range(prefix: &Prefix) -> Option<(u32, u32)> {
    match *prefix {
        Prefix::Any => Some((0, u32::MAX)),
        Prefix::V4 { addr, len } => {
            let mask = u32::MAX.checked_shl(32 - u32::from(len)).unwrap_or(0);
            let lo = u32::from(addr) & mask;
            Some((lo, lo | !mask))
        }
        Prefix::V6 { .. } => None,
    }
}

/// Phase 0 of one 16-bit chunk from each rule's `(index, lo, hi)`: a sweep over the
/// range ends keeps the set of rules holding the current value.
fn chunk16(
    ranges: &[(u32, u16, u16)],
    words: usize,
    budget: &mut Budget,
) -> Option<(Chunk16, Classes)> {
    // (value where it changes, rule, whether the rule starts there).
    let mut events: Vec<(u32, u32, bool)> = Vec::with_capacity(ranges.len() * 2);
    for &(index, lo, hi) in ranges {
        events.push((u32::from(lo), index, true));
        if hi < u16::MAX {
            events.push((u32::from(hi) + 1, index, false));
        }
    }
    events.sort_unstable_by_key(|&(at, _, _)| at);
    budget.charge((events.len() as u64 + 1) * words as u64, (1 << 16) * 2)?;
    let mut classes = Classes::new(words);
    let mut table: Chunk16 = vec![0u16; 1 << 16]
        .into_boxed_slice()
        .try_into()
        .expect("65536 entries");
    let mut set = vec![0u64; words];
    let mut from = 0usize;
    let mut events = events.into_iter().peekable();
    loop {
        let to = events.peek().map_or(1 << 16, |&(at, _, _)| at as usize);
        if to > from {
            let class = classes.intern(&set)?;
            table[from..to].fill(class);
            from = to;
        }
        let Some((at, index, starts)) = events.next() else {
            break;
        };
        debug_assert_eq!(at as usize, from);
        let (word, bit) = (index as usize / 64, index % 64);
        if starts {
            set[word] |= 1 << bit;
        } else {
            set[word] &= !(1 << bit);
        }
    }
    Some((table, classes))
}

/// Phase 0 of the protocol: each of the 256 values tested against every IPv4 rule
/// (the rules in `v4_rules`, as listed for any chunk).
fn proto_chunk(
    rules: &[Rule],
    v4_rules: &[(u32, u16, u16)],
    words: usize,
    budget: &mut Budget,
) -> Option<(Box<[u16; 256]>, Classes)> {
    budget.charge(256 * words as u64, 256 * 2)?;
    let mut classes = Classes::new(words);
    let mut table = Box::new([0u16; 256]);
    let mut set = vec![0u64; words];
    for (value, class) in table.iter_mut().enumerate() {
        set.fill(0);
        for &(index, _, _) in v4_rules {
            let proto: Proto = rules[index as usize].proto;
            if proto.matches(value as u8) {
                set[index as usize / 64] |= 1 << (index % 64);
            }
        }
        *class = classes.intern(&set)?;
    }
    Some((table, classes))
}

/// The cross product of two class sets: each pair's intersection, interned.
fn cross(a: &Classes, b: &Classes, budget: &mut Budget) -> Option<(Cross<u16>, Classes)> {
    let words = a.words;
    let cells = a.len() * b.len();
    budget.charge(cells as u64 * words as u64, cells * 2)?;
    let mut classes = Classes::new(words);
    let mut table = Vec::with_capacity(cells);
    let mut set = vec![0u64; words];
    for i in 0..a.len() {
        let left = a.get(i);
        for j in 0..b.len() {
            for ((out, &x), &y) in set.iter_mut().zip(left).zip(b.get(j)) {
                *out = x & y;
            }
            table.push(classes.intern(&set)?);
        }
    }
    let cross = Cross {
        stride: b.len(),
        cells: table.into_boxed_slice(),
    };
    Some((cross, classes))
}

/// The last phase: for each pair of classes, the first rule both hold.
fn first_rules(a: &Classes, b: &Classes, budget: &mut Budget) -> Option<Cross<u32>> {
    let cells = a.len() * b.len();
    budget.charge(cells as u64 * a.words as u64, cells * 4)?;
    let mut table = Vec::with_capacity(cells);
    for i in 0..a.len() {
        let left = a.get(i);
        for j in 0..b.len() {
            let first = left
                .iter()
                .zip(b.get(j))
                .enumerate()
                .find_map(|(w, (&x, &y))| {
                    let both = x & y;
                    (both != 0).then(|| w as u32 * 64 + both.trailing_zeros())
                })
                .unwrap_or(NO_MATCH);
            table.push(first);
        }
    }
    Some(Cross {
        stride: b.len(),
        cells: table.into_boxed_slice(),
    })
}
