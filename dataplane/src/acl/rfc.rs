//! Recursive flow classification (RFC, Gupta and McKeown) of IPv4 keys: the lookup
//! [`super::Compiled`] uses for an IPv4 rule set whose tables fit a memory and build
//! budget. It owns the equivalence-class build and the burst lookup.
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
//! each combination directly (`u16`, so at most 65,534 rules). The pairing of phase 2
//! is the one with the smallest operands whose tables fit.
//!
//! A lookup is thus thirteen table loads in four dependent rounds, without a branch on
//! the key; the loads of independent keys in a burst overlap.
//!
//! # Build
//!
//! A class is a set of rules, kept sparse (its non-zero 64-rule words) and interned by
//! content. Two things keep the classes few and the build short:
//!
//! - *Wildcard cut*: a class of a table stops at its first rule that holds every value
//!   of every chunk the table does not cover — that rule matches whatever those chunks
//!   hold, so no later rule of the class can be the first match. Firewall-style sets,
//!   with many rules wild in some fields, collapse to far fewer classes.
//! - *Address spans*: a source (destination) class is a function of the address, so the
//!   phase-1 address tables are filled by sweeping the 32-bit ranges of the rules once
//!   and looking each pair of half classes up as an address in the sorted spans, rather
//!   than intersecting every pair of half classes.
//!
//! Other intersections walk the operand with fewer words per class against the other
//! as dense bit sets; the last phase finds each pair's first common rule with the
//! other operand's words stored word-major.
//!
//! # Budget
//!
//! The build gives up (returns `None`, and the caller uses the decision trees) when a
//! class count passes `u16`, the tables pass [`MAX_BYTES`] or the estimated work passes
//! [`MAX_BUILD_WORDS`]. So that a rule set RFC cannot take costs little:
//!
//! - before any table is built, each table's class count gets a floor (rules pairwise
//!   disjoint in a dimension the table covers each give it a class of its own, see
//!   [`floor`]); a rule set whose tables exceed [`MAX_BYTES`] at those floors is refused
//!   at once (the firewall and IP-chain sets, whose address halves alone would pass it);
//! - each table's build stops as soon as its class count, with the others' at their
//!   floors or exact, makes the tables too large; once built, its exact count replaces
//!   its floor in the bound the tables after it are held to;
//! - the sweeps are charged before any of them runs and each cross product before it is
//!   computed; a phase-2 pairing whose floor is already past its room is not tried, one
//!   stops as soon as its class count makes the last table too large, and after one
//!   fails the next is tried only within half the work budget.

use super::rule::{Prefix, Proto, Rule};
use super::{FlowKey, NO_MATCH};
use floor::{Floor, Table, DIMENSIONS, PHASE0_BYTES};
use rustc_hash::FxHashMap;
use std::ops::ControlFlow;

mod floor;

/// The most memory the tables of one classifier may take.
pub const MAX_BYTES: usize = 16 << 20;

/// The most work the build may do, in 64-bit words touched (a bound on build time:
/// on the order of a nanosecond per word).
pub const MAX_BUILD_WORDS: u64 = 48 << 20;

/// Chunks: source high and low halves, destination high and low, ports, protocol.
const CHUNKS: usize = 7;

/// The phase-2 pairings: which phase-1 results (0 source, 1 destination, 2 ports)
/// phase 2 combines, and which one phase 3 adds.
const ORDERS: [[usize; 3]; 3] = [[0, 1, 2], [0, 2, 1], [1, 2, 0]];
/// The protocol's chunk.
const PROTO: usize = 6;

/// One 16-bit chunk's class table.
type Chunk16 = Box<[u16; 1 << 16]>;

/// A set of rules as its non-zero 64-rule words, `(word index, bits)` in index order.
type Set = [(u32, u64)];

/// The interned equivalence classes of one table: sets of rules.
#[derive(Debug)]
struct Classes {
    /// The chunks the table's classes cover (bit `c` for chunk `c`).
    covers: u8,
    /// The rules that hold every value of every chunk not covered (a dense bit set):
    /// the first such rule of a class wins over every later one, so a class's set ends
    /// there.
    wild: Vec<u64>,
    /// Class `c`'s set: `words[starts[c]..starts[c + 1]]`.
    words: Vec<(u32, u64)>,
    starts: Vec<usize>,
    /// The first class of each set hash, and per class the next one with its hash.
    by_hash: FxHashMap<u64, u16>,
    next: Vec<u16>,
    /// The set being interned.
    scratch: Vec<(u32, u64)>,
}

/// The last table's entry for no rule (so RFC takes fewer than 65,535 rules).
const NO_RULE: u16 = u16::MAX;

/// Marks the end of a hash chain.
const END: u16 = u16::MAX;

impl Classes {
    /// Classes covering the chunks in `covers`, given per chunk the rules holding all
    /// of its values.
    fn new(covers: u8, full: &[Vec<u64>; CHUNKS]) -> Self {
        let mut wild = full[0].clone();
        wild.fill(u64::MAX);
        for (chunk, full) in full.iter().enumerate() {
            if covers & (1 << chunk) == 0 {
                for (wild, &full) in wild.iter_mut().zip(full) {
                    *wild &= full;
                }
            }
        }
        Self {
            covers,
            wild,
            words: Vec::new(),
            starts: vec![0],
            by_hash: FxHashMap::default(),
            next: Vec::new(),
            scratch: Vec::new(),
        }
    }

    fn len(&self) -> usize {
        self.next.len()
    }

    fn get(&self, class: usize) -> &Set {
        &self.words[self.starts[class]..self.starts[class + 1]]
    }

    /// The classes' sets word-major: per word `w` of `words`, `(class, bits)` for every
    /// class with rules in it, in class order.
    fn columns(&self, words: usize) -> Vec<Vec<(u32, u64)>> {
        let mut columns: Vec<Vec<(u32, u64)>> = vec![Vec::new(); words];
        for class in 0..self.len() {
            for &(word, bits) in self.get(class) {
                columns[word as usize].push((class as u32, bits));
            }
        }
        columns
    }

    /// Every class as a dense bit set of `words` words, class `c` at `c * words`.
    fn dense(&self, words: usize) -> Vec<u64> {
        let mut dense = vec![0u64; self.len() * words];
        for class in 0..self.len() {
            for &(word, bits) in self.get(class) {
                dense[class * words + word as usize] = bits;
            }
        }
        dense
    }

    /// The class of the rules in both `left` and the dense `right` (all of `left` when
    /// `right` is `None`), cut after the first wild rule; added if new. `None` past
    /// `u16` classes.
    fn intern_and(&mut self, left: &Set, right: Option<&[u64]>) -> Option<u16> {
        self.scratch.clear();
        let mut hash = 0u64;
        for &(word, bits) in left {
            let bits = right.map_or(bits, |right| bits & right[word as usize]);
            if bits == 0 {
                continue;
            }
            let wild = bits & self.wild[word as usize];
            let bits = if wild != 0 {
                bits & (u64::MAX >> (63 - wild.trailing_zeros()))
            } else {
                bits
            };
            hash = (hash ^ bits ^ u64::from(word).rotate_left(40))
                .wrapping_mul(0x9E37_79B9_7F4A_7C15)
                .rotate_left(29);
            self.scratch.push((word, bits));
            if wild != 0 {
                break;
            }
        }
        let first = self.by_hash.get(&hash).copied();
        let mut class = first.unwrap_or(END);
        while class != END {
            if self.get(usize::from(class)) == &self.scratch[..] {
                return Some(class);
            }
            class = self.next[usize::from(class)];
        }
        let id = u16::try_from(self.len()).ok().filter(|&id| id != END)?;
        self.words.extend_from_slice(&self.scratch);
        self.starts.push(self.words.len());
        self.next.push(first.unwrap_or(END));
        self.by_hash.insert(hash, id);
        Some(id)
    }
}

/// Sweeps the values `0..end` given each rule's `(index, lo, hi)` range: calls
/// `segment(from, to, rules)` for each maximal run of values `from..to` held by the
/// same rules (bit sets of `words` words), until it breaks.
fn sweep(
    ranges: impl Iterator<Item = (u32, u64, u64)>,
    end: u64,
    words: usize,
    mut segment: impl FnMut(u64, u64, &Set) -> ControlFlow<()>,
) {
    // (value where it changes, rule, whether the rule starts there).
    let mut events: Vec<(u64, u32, bool)> = Vec::new();
    for (index, lo, hi) in ranges {
        events.push((lo, index, true));
        if hi + 1 < end {
            events.push((hi + 1, index, false));
        }
    }
    events.sort_unstable_by_key(|&(at, _, _)| at);
    // The current rules, dense, with a summary bit per non-zero word.
    let mut dense = vec![0u64; words];
    let mut summary = vec![0u64; words.div_ceil(64)];
    let mut set = Vec::new();
    let mut from = 0;
    let mut events = events.into_iter().peekable();
    loop {
        let to = events.peek().map_or(end, |&(at, _, _)| at);
        if to > from {
            set.clear();
            for (at, &bits) in summary.iter().enumerate() {
                let mut bits = bits;
                while bits != 0 {
                    let word = at * 64 + bits.trailing_zeros() as usize;
                    set.push((word as u32, dense[word]));
                    bits &= bits - 1;
                }
            }
            if segment(from, to, &set).is_break() {
                return;
            }
            from = to;
        }
        let Some((_, index, starts)) = events.next() else {
            break;
        };
        let (word, bit) = (index as usize / 64, index % 64);
        if starts {
            dense[word] |= 1 << bit;
        } else {
            dense[word] &= !(1 << bit);
        }
        let flag = 1 << (word % 64);
        if dense[word] == 0 {
            summary[word / 64] &= !flag;
        } else {
            summary[word / 64] |= flag;
        }
    }
}

/// [`sweep`] with each run's rules interned into `classes`: calls
/// `run(from, to, class)` per run; `None` once `classes` passes `max_classes` (or
/// `u16`), the sweep stopped there.
fn sweep_classes(
    ranges: impl Iterator<Item = (u32, u64, u64)>,
    end: u64,
    words: usize,
    classes: &mut Classes,
    max_classes: usize,
    mut run: impl FnMut(u64, u64, u16),
) -> Option<()> {
    let mut stopped = false;
    sweep(ranges, end, words, |from, to, set| {
        match classes.intern_and(set, None) {
            Some(class) if classes.len() <= max_classes => {
                run(from, to, class);
                ControlFlow::Continue(())
            }
            _ => {
                stopped = true;
                ControlFlow::Break(())
            }
        }
    });
    (!stopped).then_some(())
}

/// A dense bit set as a [`Set`] into `out`.
fn sparse(dense: &[u64], out: &mut Vec<(u32, u64)>) {
    out.clear();
    out.extend(
        dense
            .iter()
            .enumerate()
            .filter(|(_, &bits)| bits != 0)
            .map(|(word, &bits)| (word as u32, bits)),
    );
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

/// Build state: the work spent so far against [`MAX_BUILD_WORDS`] and the table bytes
/// against [`MAX_BYTES`].
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
    /// The first rule, or [`NO_RULE`].
    last: Cross<u16>,
}

impl Rfc {
    /// Builds the tables for the IPv4 keys of `rules` (priority order); `None` when a
    /// table, the class count or the build work would pass the budget.
    pub fn new(rules: &[Rule]) -> Option<Self> {
        if rules.len() >= usize::from(NO_RULE) {
            return None;
        }
        let Inputs {
            words,
            ranges,
            addresses,
            dimensions,
            full,
        } = Inputs::new(rules);
        // A rule set whose tables cannot fit even at their class counts' floors is
        // refused before any table is built; each table's build stops once its count
        // alone makes them too large, and its exact count then replaces its floor.
        let floor = Floor::new(dimensions, &full);
        if !floor.fits() {
            return None;
        }
        let mut build = Builder {
            words,
            full,
            budget: Budget { words: 0, bytes: 0 },
            floor,
        };
        build.sweeps(ranges[0].len())?;
        // Each phase-1 table right after its operands, so a rule set that cannot fit
        // is refused before the work on the other chunks; the ports first, as they
        // cost least and their count is the one the floors know least well.
        let [src_hi, src_lo, dst_hi, dst_lo, sport, dport] = ranges;
        let (proto, proto_classes) = build.proto_chunk(rules, &sport)?;
        let (sport, sport_classes) = build.chunk16(Table::Sport, &sport)?;
        let (dport, dport_classes) = build.chunk16(Table::Dport, &dport)?;
        let (port_pair, pair_classes) =
            build.phase1_cross(Table::PortPair, &sport_classes, &dport_classes)?;
        let (ports, port_classes) =
            build.phase1_cross(Table::Ports, &pair_classes, &proto_classes)?;
        let (src_hi, src_hi_classes) = build.chunk16(Table::SrcHi, &src_hi)?;
        let (src_lo, src_lo_classes) = build.chunk16(Table::SrcLo, &src_lo)?;
        let src_halves = [(&*src_hi, &src_hi_classes), (&*src_lo, &src_lo_classes)];
        let (src, src_classes) = build.address_cross(Table::Src, src_halves, &addresses[0])?;
        let (dst_hi, dst_hi_classes) = build.chunk16(Table::DstHi, &dst_hi)?;
        let (dst_lo, dst_lo_classes) = build.chunk16(Table::DstLo, &dst_lo)?;
        let dst_halves = [(&*dst_hi, &dst_hi_classes), (&*dst_lo, &dst_lo_classes)];
        let (dst, dst_classes) = build.address_cross(Table::Dst, dst_halves, &addresses[1])?;

        // Phase 2 tries the pairs with the smallest product first, skipping one whose
        // floor is past its room. After one is tried and fails, the next is tried only
        // if the build's work stays under half the budget with it
        // (a rule set whose pairings fail one after the other rarely has one that
        // fits); once one fits, the others are tried if the work stays under a quarter,
        // and the one whose tables come out smallest gets its last table built.
        let phase1 = [&src_classes, &dst_classes, &port_classes];
        // Positions in `ORDERS`, smallest product first.
        let mut orders = [0, 1, 2];
        orders.sort_by_key(|&at| phase1[ORDERS[at][0]].len() * phase1[ORDERS[at][1]].len());
        // (order, phase-2 table and classes, bytes of the phase-2 and last tables).
        let mut best: Option<([usize; 3], Cross<u16>, Classes, usize)> = None;
        let mut failed = false;
        for at in orders {
            let order = ORDERS[at];
            let room = match &best {
                None => MAX_BYTES.saturating_sub(build.budget.bytes),
                Some(best) => best.3 - 1,
            };
            let third = phase1[order[2]].len().max(1);
            // Past this many classes the tables cannot fit in `room`: stop early, or
            // do not start when the pairing's floor is already past it.
            let max_classes =
                (room / 2).saturating_sub(phase1[order[0]].len() * phase1[order[1]].len()) / third;
            if max_classes < build.floor.mid_floor(at) {
                continue;
            }
            let allowed = match (&best, failed) {
                (Some(_), _) => MAX_BUILD_WORDS / 4,
                (None, true) => MAX_BUILD_WORDS / 2,
                (None, false) => MAX_BUILD_WORDS,
            };
            let work = build.budget.words + build.cross_work(phase1[order[0]], phase1[order[1]]);
            if work > allowed {
                continue;
            }
            let bytes = build.budget.bytes;
            let Some((mid, mid_classes)) =
                build.cross(phase1[order[0]], phase1[order[1]], max_classes)
            else {
                build.budget.bytes = bytes;
                failed = true;
                continue;
            };
            debug_assert!(
                mid_classes.len() >= build.floor.mid_floor(at),
                "phase-2 floor above its class count"
            );
            // Only the kept phase-2 table counts against the memory budget.
            build.budget.bytes = bytes;
            let tables = 2 * (mid.cells.len() + mid_classes.len() * third);
            if best.as_ref().is_none_or(|best| tables < best.3) {
                best = Some((order, mid, mid_classes, tables));
            }
        }
        let (order, mid, mid_classes, _) = best?;
        build.budget.charge(0, mid.cells.len() * 2)?;
        let last = build.first_rules(&mid_classes, phase1[order[2]])?;
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

    /// Classifies IPv4 `keys` into `out` (`out[i]` for `keys[i]`).
    #[inline]
    pub fn classify_burst(&self, keys: &[FlowKey], out: &mut [u32]) {
        match self.order {
            [0, 1, 2] => self.burst_in::<0, 1, 2>(keys, out),
            [0, 2, 1] => self.burst_in::<0, 2, 1>(keys, out),
            _ => self.burst_in::<1, 2, 0>(keys, out),
        }
    }

    /// [`Self::classify_burst`] for one phase-2 pairing: up to 32 keys go through
    /// phases 0 and 1 together, then through phases 2 and 3, so the loads of a round
    /// are independent across keys and their cache misses overlap.
    fn burst_in<const A: usize, const B: usize, const C: usize>(
        &self,
        keys: &[FlowKey],
        out: &mut [u32],
    ) {
        let mut phase1 = [[0u16; 3]; 32];
        for (keys, out) in keys.chunks(32).zip(out.chunks_mut(32)) {
            for (key, classes) in keys.iter().zip(phase1.iter_mut()) {
                let (src, dst) = (key.src_v4(), key.dst_v4());
                *classes = [
                    self.src.at(
                        self.src_hi[(src >> 16) as usize],
                        self.src_lo[(src & 0xFFFF) as usize],
                    ),
                    self.dst.at(
                        self.dst_hi[(dst >> 16) as usize],
                        self.dst_lo[(dst & 0xFFFF) as usize],
                    ),
                    self.ports.at(
                        self.port_pair.at(
                            self.sport[usize::from(key.src_port)],
                            self.dport[usize::from(key.dst_port)],
                        ),
                        self.proto[usize::from(key.proto)],
                    ),
                ];
            }
            for (out, classes) in out.iter_mut().zip(&phase1) {
                let mid = self.mid.at(classes[A], classes[B]);
                *out = match self.last.at(mid, classes[C]) {
                    NO_RULE => NO_MATCH,
                    rule => u32::from(rule),
                };
            }
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
            + self.last.cells.len() * 2
    }
}

/// What the build reads of the rules: per IPv4 rule its range in each chunk and its
/// addresses, and per chunk the rules holding all of its values.
struct Inputs {
    /// Words per dense bit set of rules.
    words: usize,
    /// Per 16-bit chunk, each rule's `(index, lo, hi)`; rules that cannot match an IPv4
    /// key get none, so their bit is never set.
    ranges: [Vec<(u32, u16, u16)>; 6],
    /// The source and destination addresses' `(index, lo, hi)`.
    addresses: [Vec<(u32, u32, u32)>; 2],
    /// The same ranges as the floors take them: the six chunks, then the addresses.
    dimensions: [Vec<(u32, u32, u32)>; DIMENSIONS],
    /// Per chunk, the rules whose range in it is everything (dense).
    full: [Vec<u64>; CHUNKS],
}

impl Inputs {
    fn new(rules: &[Rule]) -> Self {
        let words = rules.len().div_ceil(64).max(1);
        let mut ranges: [Vec<(u32, u16, u16)>; 6] = Default::default();
        let mut addresses: [Vec<(u32, u32, u32)>; 2] = Default::default();
        let mut dimensions: [Vec<(u32, u32, u32)>; DIMENSIONS] = Default::default();
        let mut full: [Vec<u64>; CHUNKS] = std::array::from_fn(|_| vec![0; words]);
        for (index, rule) in rules.iter().enumerate() {
            let (Some(src), Some(dst)) = (v4_range(&rule.src), v4_range(&rule.dst)) else {
                continue;
            };
            // An inverted port range holds no port: the rule matches nothing (as in
            // `Rule::matches`), so it gets no bit either.
            if rule.src_port.lo > rule.src_port.hi || rule.dst_port.lo > rule.dst_port.hi {
                continue;
            }
            let halves = |(lo, hi): (u32, u32)| {
                [
                    ((lo >> 16) as u16, (hi >> 16) as u16),
                    (lo as u16, hi as u16),
                ]
            };
            addresses[0].push((index as u32, src.0, src.1));
            addresses[1].push((index as u32, dst.0, dst.1));
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
            let (word, bit) = (index / 64, index % 64);
            dimensions[6].push((index as u32, src.0, src.1));
            dimensions[7].push((index as u32, dst.0, dst.1));
            for (chunk, (lo, hi)) in chunks.into_iter().enumerate() {
                ranges[chunk].push((index as u32, lo, hi));
                dimensions[chunk].push((index as u32, lo.into(), hi.into()));
                if (lo, hi) == (0, u16::MAX) {
                    full[chunk][word] |= 1 << bit;
                }
            }
            if matches!(rule.proto, Proto::Any | Proto::Masked { mask: 0, .. }) {
                full[PROTO][word] |= 1 << bit;
            }
        }
        Self {
            words,
            ranges,
            addresses,
            dimensions,
            full,
        }
    }
}

/// An IPv4 prefix (or any) as a range of host-order addresses; `None` for IPv6.
fn v4_range(prefix: &Prefix) -> Option<(u32, u32)> {
    match prefix {
        Prefix::Any => Some((0, u32::MAX)),
        Prefix::Cidr(_) => prefix.v4_range(),
    }
}

/// Build state: the rules holding every value of each chunk, the budget spent, and
/// the class counts' floors.
struct Builder {
    /// Words per dense bit set.
    words: usize,
    /// Per chunk, the rules whose range in it is everything.
    full: [Vec<u64>; CHUNKS],
    budget: Budget,
    /// The class counts so far (see [`floor`]).
    floor: Floor,
}

impl Builder {
    /// The work of one sweep over `ranges` ranges (see [`Self::sweeps`]).
    fn sweep_work(&self, ranges: usize) -> u64 {
        (ranges as u64 * 2 + 1) * self.words as u64 / 4
    }

    /// Charges the eight sweeps of phases 0 and 1 (six chunks, two addresses) and the
    /// phase-0 tables at once, so a rule set too large for them costs nothing.
    fn sweeps(&mut self, ranges: usize) -> Option<()> {
        self.budget
            .charge(8 * self.sweep_work(ranges), PHASE0_BYTES)
    }

    /// Records `table`'s class count; `None` when the tables can no longer fit.
    fn built(&mut self, table: Table, classes: &Classes) -> Option<()> {
        self.floor.set(table, classes.len());
        self.floor.fits().then_some(())
    }

    /// Phase 0 of a 16-bit chunk (`which`, one of the six) from each rule's
    /// `(index, lo, hi)` (charged by [`Self::sweeps`]).
    fn chunk16(&mut self, which: Table, ranges: &[(u32, u16, u16)]) -> Option<(Chunk16, Classes)> {
        let chunk = which as usize;
        let max_classes = self.floor.max_classes(which);
        let mut classes = Classes::new(1 << chunk, &self.full);
        let mut table: Chunk16 = vec![0u16; 1 << 16]
            .into_boxed_slice()
            .try_into()
            .expect("65536 entries");
        let ranges = ranges
            .iter()
            .map(|&(index, lo, hi)| (index, u64::from(lo), u64::from(hi)));
        sweep_classes(
            ranges,
            1 << 16,
            self.words,
            &mut classes,
            max_classes,
            |from, to, class| table[from as usize..to as usize].fill(class),
        )?;
        self.built(which, &classes)?;
        Some((table, classes))
    }

    /// Phase 1 of an address: the classes of the whole 32-bit values from each rule's
    /// `(index, lo, hi)`, and the table from the classes of the two halves (`halves`:
    /// the high and low chunk's table and classes) to them. Every pair of half classes
    /// is an address: its class is that of the 32-bit range the address falls in, so
    /// the table is filled by walking the ranges instead of intersecting sets.
    fn address_cross(
        &mut self,
        which: Table,
        halves: [(&[u16; 1 << 16], &Classes); 2],
        ranges: &[(u32, u32, u32)],
    ) -> Option<(Cross<u16>, Classes)> {
        let max_classes = self.floor.max_classes(which);
        let [(hi_table, hi), (lo_table, lo)] = halves;
        let cells = hi.len() * lo.len();
        // The sweep is charged by `sweeps`.
        self.budget.charge(cells as u64 / 8, cells * 2)?;
        let mut classes = Classes::new(hi.covers | lo.covers, &self.full);
        // The 32-bit ranges' classes: (first value, class), in value order.
        let mut spans: Vec<(u64, u16)> = Vec::new();
        let ranges = ranges
            .iter()
            .map(|&(index, lo, hi)| (index, u64::from(lo), u64::from(hi)));
        sweep_classes(
            ranges,
            1 << 32,
            self.words,
            &mut classes,
            max_classes,
            |from, _, class| spans.push((from, class)),
        )?;
        self.built(which, &classes)?;
        // One value of each half class; the low ones in value order.
        let representatives = |table: &[u16; 1 << 16], count: usize| {
            let mut first = vec![u32::MAX; count];
            for (value, &class) in table.iter().enumerate().rev() {
                first[usize::from(class)] = value as u32;
            }
            first
        };
        let hi_values = representatives(hi_table, hi.len());
        let mut lo_values: Vec<(u32, usize)> = representatives(lo_table, lo.len())
            .into_iter()
            .enumerate()
            .map(|(class, value)| (value, class))
            .collect();
        lo_values.sort_unstable();
        let mut table = vec![0u16; cells];
        for (hi_class, &hi_value) in hi_values.iter().enumerate() {
            let base = u64::from(hi_value) << 16;
            let mut span = spans.partition_point(|&(from, _)| from <= base) - 1;
            for &(lo_value, lo_class) in &lo_values {
                let address = base | u64::from(lo_value);
                while span + 1 < spans.len() && spans[span + 1].0 <= address {
                    span += 1;
                }
                table[hi_class * lo.len() + lo_class] = spans[span].1;
            }
        }
        let cross = Cross {
            stride: lo.len(),
            cells: table.into_boxed_slice(),
        };
        Some((cross, classes))
    }

    /// Phase 0 of the protocol: each of the 256 values tested against every IPv4 rule
    /// (the rules in `v4_rules`, as listed for any chunk).
    fn proto_chunk(
        &mut self,
        rules: &[Rule],
        v4_rules: &[(u32, u16, u16)],
    ) -> Option<(Box<[u16; 256]>, Classes)> {
        self.budget.charge(256 * self.words as u64, 0)?;
        let mut classes = Classes::new(1 << PROTO, &self.full);
        let mut table = Box::new([0u16; 256]);
        let mut dense = vec![0u64; self.words];
        let mut set = Vec::new();
        // Rules grouped by protocol set: few distinct ones.
        let mut groups: Vec<(Proto, Vec<u64>)> = Vec::new();
        for &(index, _, _) in v4_rules {
            let proto = rules[index as usize].proto;
            let at = match groups.iter().position(|(p, _)| *p == proto) {
                Some(at) => at,
                None => {
                    groups.push((proto, vec![0; self.words]));
                    groups.len() - 1
                }
            };
            groups[at].1[index as usize / 64] |= 1 << (index % 64);
        }
        for (value, class) in table.iter_mut().enumerate() {
            dense.fill(0);
            for (proto, members) in &groups {
                if proto.matches(value as u8) {
                    for (dense, &member) in dense.iter_mut().zip(members) {
                        *dense |= member;
                    }
                }
            }
            sparse(&dense, &mut set);
            *class = classes.intern_and(&set, None)?;
        }
        self.built(Table::Proto, &classes)?;
        Some((table, classes))
    }

    /// The work of combining every class of `a` with every class of `b`: per pair the
    /// words of the sparser operand's set (see [`Self::pairs`]).
    fn cross_work(&self, a: &Classes, b: &Classes) -> u64 {
        let pairs = (a.len() * b.len()) as u64;
        let walked =
            (a.words.len() as u64 * b.len() as u64).min(b.words.len() as u64 * a.len() as u64);
        walked + pairs + (a.len().min(b.len()) * self.words) as u64
    }

    /// Charges [`Self::cross_work`] and a table of `cell_bytes` per pair.
    fn charge_cross(&mut self, a: &Classes, b: &Classes, cell_bytes: usize) -> Option<()> {
        let work = self.cross_work(a, b);
        self.budget.charge(work, a.len() * b.len() * cell_bytes)
    }

    /// Calls `cell(position, sparse set, dense set)` for every pair of a class of `a`
    /// and a class of `b`, `position` being `a * b.len() + b`, until it returns false:
    /// the operand with fewer words per class is walked, the other one looked up as
    /// dense bit sets.
    fn pairs(&self, a: &Classes, b: &Classes, mut cell: impl FnMut(usize, &Set, &[u64]) -> bool) {
        let walk_a = a.words.len() * b.len() <= b.words.len() * a.len();
        let (walked, dense) = if walk_a { (a, b) } else { (b, a) };
        let dense_sets = dense.dense(self.words);
        for i in 0..walked.len() {
            let left = walked.get(i);
            for (j, right) in dense_sets.chunks_exact(self.words).enumerate() {
                let position = if walk_a {
                    i * b.len() + j
                } else {
                    j * b.len() + i
                };
                if !cell(position, left, right) {
                    return;
                }
            }
        }
    }

    /// A phase-1 cross product (`table`: the port pair, or the ports with the
    /// protocol), stopped once its class count makes the tables too large.
    fn phase1_cross(
        &mut self,
        table: Table,
        a: &Classes,
        b: &Classes,
    ) -> Option<(Cross<u16>, Classes)> {
        let (cross, classes) = self.cross(a, b, self.floor.max_classes(table))?;
        self.built(table, &classes)?;
        Some((cross, classes))
    }

    /// The cross product of two class sets: each pair's intersection, interned; `None`
    /// past `max_classes` classes.
    fn cross(
        &mut self,
        a: &Classes,
        b: &Classes,
        max_classes: usize,
    ) -> Option<(Cross<u16>, Classes)> {
        self.charge_cross(a, b, 2)?;
        let mut classes = Classes::new(a.covers | b.covers, &self.full);
        let mut table = vec![0u16; a.len() * b.len()];
        let mut stopped = false;
        self.pairs(a, b, |position, left, right| {
            match classes.intern_and(left, Some(right)) {
                Some(class) if classes.len() <= max_classes => table[position] = class,
                _ => stopped = true,
            }
            !stopped
        });
        if stopped {
            return None;
        }
        let cross = Cross {
            stride: b.len(),
            cells: table.into_boxed_slice(),
        };
        Some((cross, classes))
    }

    /// The last phase: for each pair of classes, the first rule both hold.
    ///
    /// Per class of `a`, each of its words is checked against the classes of `b` with
    /// rules in that word (`b`'s sets stored word-major); words come in rule order, so
    /// the first common word gives the first common rule.
    fn first_rules(&mut self, a: &Classes, b: &Classes) -> Option<Cross<u16>> {
        self.charge_cross(a, b, 2)?;
        let mut table = vec![NO_RULE; a.len() * b.len()];
        let columns = b.columns(self.words);
        for (i, row) in table.chunks_exact_mut(b.len().max(1)).enumerate() {
            for &(word, bits) in a.get(i) {
                for &(j, other) in &columns[word as usize] {
                    let both = bits & other;
                    let cell = &mut row[j as usize];
                    if both != 0 && *cell == NO_RULE {
                        *cell = (word * 64 + both.trailing_zeros()) as u16;
                    }
                }
            }
        }
        Some(Cross {
            stride: b.len(),
            cells: table.into_boxed_slice(),
        })
    }
}
