//! Lower bounds on the class counts of RFC's tables, known before the tables are built,
//! so that [`super::Rfc::new`] refuses a rule set whose tables cannot fit in
//! [`super::MAX_BYTES`] without spending the build on it, and stops a table's build as
//! soon as its class count alone makes them too large.
//!
//! # The bound
//!
//! A table's classes are the distinct sets of rules holding a key's values in the chunks
//! the table covers, each cut after its first wild rule (one that holds every value of
//! every chunk the table does not cover). Take rules that all come before the table's
//! first wild rule and whose ranges in one covered dimension are pairwise disjoint: a
//! key inside one of them (in the covered chunks) is held by that rule and by none of
//! the others, and nothing cuts that rule from its set, so each of them puts a different
//! class in the table. The largest such family in a dimension is found by the greedy
//! interval-scheduling pass (ranges by their end, each kept when it starts after the
//! last kept one ends), and the table's floor is the largest over its dimensions.
//!
//! A cross-product table has a cell per pair of its operands' classes, so the bytes of
//! every table follow from the class counts; each count is its floor until the table is
//! built and exact after.

use super::{CHUNKS, MAX_BYTES, ORDERS};

/// The tables whose class counts size the others; the six 16-bit chunk tables first,
/// in chunk order, so that `table as usize` is a chunk table's chunk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Table {
    SrcHi,
    SrcLo,
    DstHi,
    DstLo,
    Sport,
    Dport,
    Proto,
    /// Phase 1: source addresses (from the two source halves).
    Src,
    /// Phase 1: destination addresses.
    Dst,
    /// The source and destination port pair.
    PortPair,
    /// Phase 1: the port pair with the protocol.
    Ports,
}

const TABLES: usize = 11;

/// Ranges a floor is taken over: the six 16-bit chunks (in chunk order), then the
/// whole 32-bit source and destination addresses.
pub(super) const DIMENSIONS: usize = 8;
const SRC32: usize = 6;
const DST32: usize = 7;

/// Bytes of the phase-0 tables (six 16-bit chunks and the protocol).
pub(super) const PHASE0_BYTES: usize = 6 * (1 << 16) * 2 + 256 * 2;

impl Table {
    /// The chunks a table covers (bit `c` for chunk `c`).
    #[cfg(test)]
    fn covers(self) -> u8 {
        self.covers_and_dimensions().0
    }

    /// The chunks the table's classes cover (bit `c` for chunk `c`) and the dimensions
    /// its floor may be taken over.
    fn covers_and_dimensions(self) -> (u8, &'static [usize]) {
        match self {
            Self::SrcHi => (1 << 0, &[0]),
            Self::SrcLo => (1 << 1, &[1]),
            Self::DstHi => (1 << 2, &[2]),
            Self::DstLo => (1 << 3, &[3]),
            Self::Sport => (1 << 4, &[4]),
            Self::Dport => (1 << 5, &[5]),
            Self::Proto => (1 << 6, &[]),
            Self::Src => (0b11, &[SRC32]),
            Self::Dst => (0b1100, &[DST32]),
            Self::PortPair => (0b11_0000, &[4, 5]),
            Self::Ports => (0b111_0000, &[4, 5]),
        }
    }

    /// The phase-1 tables in the order [`ORDERS`] names them.
    const PHASE1: [Self; 3] = [Self::Src, Self::Dst, Self::Ports];

    /// Every table, in declaration order (`table as usize` is its position).
    const ALL: [Self; TABLES] = [
        Self::SrcHi,
        Self::SrcLo,
        Self::DstHi,
        Self::DstLo,
        Self::Sport,
        Self::Dport,
        Self::Proto,
        Self::Src,
        Self::Dst,
        Self::PortPair,
        Self::Ports,
    ];
}

/// Per table its class count (exact once built, its floor until then), and per
/// phase-2 pairing the floor of its classes.
#[derive(Debug, Clone)]
pub(super) struct Floor {
    classes: [usize; TABLES],
    mid: [usize; ORDERS.len()],
}

impl Floor {
    /// The floors of every table, given per dimension each IPv4 rule's
    /// `(index, lo, hi)` and per chunk the rules holding all of its values (dense bit
    /// sets, as `Classes` takes them).
    pub(super) fn new(
        dimensions: [Vec<(u32, u32, u32)>; DIMENSIONS],
        full: &[Vec<u64>; CHUNKS],
    ) -> Self {
        let mut dimensions = dimensions;
        for ranges in &mut dimensions {
            ranges.retain(|&(_, lo, hi)| lo <= hi);
            ranges.sort_unstable_by_key(|&(index, _, hi)| (hi, index));
        }
        let floor = |covers: u8, dims: &[usize]| -> usize {
            let cutoff = first_wild(covers, full);
            dims.iter()
                .map(|&dim| disjoint(&dimensions[dim], cutoff))
                .max()
                .unwrap_or(0)
                .max(1)
        };
        let classes = Table::ALL.map(|table| {
            let (covers, dims) = table.covers_and_dimensions();
            floor(covers, dims)
        });
        let mid = ORDERS.map(|[x, y, _]| {
            let (x, y) = (
                Table::PHASE1[x].covers_and_dimensions(),
                Table::PHASE1[y].covers_and_dimensions(),
            );
            let dims: Vec<usize> = x.1.iter().chain(y.1).copied().collect();
            floor(x.0 | y.0, &dims)
        });
        Self { classes, mid }
    }

    /// The floor of phase-2 pairing `order`'s classes.
    pub(super) fn mid_floor(&self, order: usize) -> usize {
        self.mid[order]
    }

    /// Records `table`'s exact class count, once built.
    pub(super) fn set(&mut self, table: Table, classes: usize) {
        self.classes[table as usize] = classes;
    }

    /// The class count of `table`: exact once set, else its floor.
    #[cfg(test)]
    pub(super) fn get(&self, table: Table) -> usize {
        self.classes[table as usize]
    }

    /// The fewest bytes the tables can take, every count at its floor or exact.
    pub(super) fn bytes(&self) -> usize {
        let c = |table: Table| self.classes[table as usize];
        let phase1 = Table::PHASE1.map(c);
        let phase2 = ORDERS
            .iter()
            .zip(self.mid)
            .map(|(&[x, y, z], mid)| {
                phase1[x]
                    .saturating_mul(phase1[y])
                    .saturating_add(mid.saturating_mul(phase1[z]))
            })
            .min()
            .unwrap_or(0);
        let cells = [
            (Table::SrcHi, Table::SrcLo),
            (Table::DstHi, Table::DstLo),
            (Table::Sport, Table::Dport),
            (Table::PortPair, Table::Proto),
        ]
        .into_iter()
        .fold(phase2, |cells, (a, b)| {
            cells.saturating_add(c(a).saturating_mul(c(b)))
        });
        cells.saturating_mul(2).saturating_add(PHASE0_BYTES)
    }

    /// Whether the tables can still fit: their bytes at the floors within
    /// [`MAX_BYTES`], and no class count past what a table entry (`u16`) holds.
    pub(super) fn fits(&self) -> bool {
        // Class ids are `u16` below `u16::MAX` (the hash chains' end mark).
        let limit = usize::from(u16::MAX);
        self.bytes() <= MAX_BYTES
            && self.classes.iter().all(|&c| c <= limit)
            && self.mid.iter().all(|&c| c <= limit)
    }

    /// The most classes `table` may have with the tables still fitting (the other
    /// counts as they stand); 0 when they already cannot.
    pub(super) fn max_classes(&self, table: Table) -> usize {
        let fits_with = |classes: usize| {
            let mut floor = self.clone();
            floor.set(table, classes);
            floor.fits()
        };
        let (mut lo, mut hi) = (0, usize::from(u16::MAX));
        if !fits_with(lo) {
            return 0;
        }
        // `fits_with` holds at `lo`, and the bytes only grow with the count.
        while lo < hi {
            let mid = (lo + hi).div_ceil(2);
            if fits_with(mid) {
                lo = mid;
            } else {
                hi = mid - 1;
            }
        }
        lo
    }
}

/// The index of the first rule holding every value of every chunk not in `covers`
/// (`usize::MAX` when none does).
fn first_wild(covers: u8, full: &[Vec<u64>; CHUNKS]) -> usize {
    let words = full[0].len();
    (0..words)
        .find_map(|word| {
            let wild = (0..CHUNKS)
                .filter(|chunk| covers & (1 << chunk) == 0)
                .fold(u64::MAX, |wild, chunk| wild & full[chunk][word]);
            (wild != 0).then(|| word * 64 + wild.trailing_zeros() as usize)
        })
        .unwrap_or(usize::MAX)
}

/// The most ranges of rules before `cutoff` that are pairwise disjoint, given the
/// ranges `(index, lo, hi)` sorted by their end.
fn disjoint(ranges: &[(u32, u32, u32)], cutoff: usize) -> usize {
    let mut count = 0;
    let mut end: Option<u32> = None;
    for &(index, lo, hi) in ranges {
        if index as usize >= cutoff || end.is_some_and(|end| lo <= end) {
            continue;
        }
        count += 1;
        end = Some(hi);
    }
    count
}

#[cfg(test)]
mod tests {
    use super::super::{Inputs, ORDERS, PROTO};
    use super::*;
    use crate::acl::rule::{Action, PortRange, Prefix, Proto, Rule};
    use rand::rngs::StdRng;
    use rand::{Rng, SeedableRng};
    use std::collections::HashSet;
    use std::net::Ipv4Addr;

    /// Addresses prefixes are drawn around, so they nest and overlap.
    const BASES: [u32; 4] = [0x0A00_0000, 0x0A01_0203, 0xC0A8_FFFF, 0];
    const PORTS: [u16; 6] = [0, 53, 80, 1024, 65534, 65535];

    fn random_rule(rng: &mut StdRng) -> Rule {
        let prefix = |rng: &mut StdRng| {
            if rng.gen_ratio(1, 4) {
                return Prefix::Any;
            }
            let base = BASES[rng.gen_range(0..BASES.len())] ^ (rng.gen::<u32>() & 0x0003_0003);
            let len = [0u8, 8, 15, 16, 17, 24, 31, 32][rng.gen_range(0..8)];
            Prefix::v4(Ipv4Addr::from(base), len)
        };
        let ports = |rng: &mut StdRng| match rng.gen_range(0..4) {
            0 => PortRange::ANY,
            1 => PortRange::single(PORTS[rng.gen_range(0..PORTS.len())]),
            _ => {
                let (a, b) = (
                    PORTS[rng.gen_range(0..PORTS.len())],
                    PORTS[rng.gen_range(0..PORTS.len())],
                );
                PortRange {
                    lo: a.min(b),
                    hi: a.max(b),
                }
            }
        };
        let proto = match rng.gen_range(0..4) {
            0 => Proto::Any,
            1 => Proto::Number(6),
            2 => Proto::Number(17),
            _ => Proto::Masked {
                value: 0x10,
                mask: 0xF0,
            },
        };
        let mut rule = Rule::any(Action::Permit);
        rule.src = prefix(rng);
        rule.dst = prefix(rng);
        rule.src_port = ports(rng);
        rule.dst_port = ports(rng);
        rule.proto = proto;
        rule
    }

    /// A key's values: source, destination, source port, destination port, protocol.
    type Key = (u32, u32, u16, u16, u8);

    /// The class count of a table covering `covers`, counted by brute force: the set of
    /// rules holding each key in the covered chunks, cut after its first rule that
    /// holds every value of every other chunk, over keys at every rule's range ends.
    fn classes(rules: &[Rule], covers: u8) -> usize {
        let range = |p: &Prefix| p.v4_range().unwrap_or((0, u32::MAX));
        let full16 = |(lo, hi): (u32, u32), shift: u32| {
            (lo >> shift) & 0xFFFF == 0 && (hi >> shift) & 0xFFFF == 0xFFFF
        };
        // Per rule, whether it holds every value of chunk `c`.
        let full = |rule: &Rule, chunk: usize| match chunk {
            0 => full16(range(&rule.src), 16),
            1 => full16(range(&rule.src), 0),
            2 => full16(range(&rule.dst), 16),
            3 => full16(range(&rule.dst), 0),
            4 => rule.src_port.is_any(),
            5 => rule.dst_port.is_any(),
            _ => (0..=255).all(|p| rule.proto.matches(p)),
        };
        let wild: Vec<bool> = rules
            .iter()
            .map(|rule| (0..CHUNKS).all(|c| covers & (1 << c) != 0 || full(rule, c)))
            .collect();
        let holds = |rule: &Rule, key: Key| {
            let (src, dst) = (range(&rule.src), range(&rule.dst));
            let half = |(lo, hi): (u32, u32), shift: u32, v: u32| {
                ((lo >> shift) & 0xFFFF..=(hi >> shift) & 0xFFFF).contains(&((v >> shift) & 0xFFFF))
            };
            let checks = [
                half(src, 16, key.0),
                half(src, 0, key.0),
                half(dst, 16, key.1),
                half(dst, 0, key.1),
                rule.src_port.contains(key.2),
                rule.dst_port.contains(key.3),
                rule.proto.matches(key.4),
            ];
            (0..CHUNKS).all(|c| covers & (1 << c) == 0 || checks[c])
        };
        // Values at every range end, per field; a field the table does not cover
        // stays 0.
        let ends32 = |field: &dyn Fn(&Rule) -> (u32, u32)| -> Vec<u32> {
            let mut v: Vec<u32> = vec![0];
            for rule in rules {
                let (lo, hi) = field(rule);
                v.push(lo);
                v.extend(hi.checked_add(1));
                // The halves' own ends, for a table covering one half.
                v.push(lo & 0xFFFF);
                v.push(lo & 0xFFFF_0000);
                v.extend((hi & 0xFFFF).checked_add(1));
                v.push((hi & 0xFFFF_0000).wrapping_add(0x1_0000) & 0xFFFF_0000);
            }
            v.sort_unstable();
            v.dedup();
            v
        };
        let ends16 = |field: &dyn Fn(&Rule) -> PortRange| -> Vec<u16> {
            let mut v: Vec<u16> = vec![0];
            for rule in rules {
                let r = field(rule);
                v.push(r.lo);
                v.extend(r.hi.checked_add(1));
            }
            v.sort_unstable();
            v.dedup();
            v
        };
        let or_zero32 = |bits: u8, v: Vec<u32>| if covers & bits != 0 { v } else { vec![0] };
        let or_zero16 = |bits: u8, v: Vec<u16>| if covers & bits != 0 { v } else { vec![0] };
        let srcs = or_zero32(0b11, ends32(&|r| range(&r.src)));
        let dsts = or_zero32(0b1100, ends32(&|r| range(&r.dst)));
        let sports = or_zero16(1 << 4, ends16(&|r| r.src_port));
        let dports = or_zero16(1 << 5, ends16(&|r| r.dst_port));
        let protos: Vec<u8> = if covers & (1 << PROTO) != 0 {
            (0..=255).collect()
        } else {
            vec![0]
        };
        let mut seen: HashSet<Vec<usize>> = HashSet::new();
        for &src in &srcs {
            for &dst in &dsts {
                for &sport in &sports {
                    for &dport in &dports {
                        for &proto in &protos {
                            let key = (src, dst, sport, dport, proto);
                            let mut set = Vec::new();
                            for (index, rule) in rules.iter().enumerate() {
                                if holds(rule, key) {
                                    set.push(index);
                                    if wild[index] {
                                        break;
                                    }
                                }
                            }
                            seen.insert(set);
                        }
                    }
                }
            }
        }
        seen.len()
    }

    /// Every floor is at most the class count its table has (counted by brute force),
    /// over random rule sets of nested, overlapping and wild rules.
    #[test]
    fn floors_never_pass_the_class_counts() {
        let tables = Table::ALL;
        let mut rng = StdRng::seed_from_u64(23);
        let (mut floors, mut counts) = (0, 0);
        for round in 0..60 {
            let count = rng.gen_range(1..=9);
            let rules: Vec<Rule> = (0..count).map(|_| random_rule(&mut rng)).collect();
            let inputs = Inputs::new(&rules);
            let floor = Floor::new(inputs.dimensions, &inputs.full);
            for table in tables {
                let want = classes(&rules, table.covers());
                let got = floor.get(table);
                assert!(
                    got <= want,
                    "round {round} {table:?}: floor {got} > {want} classes"
                );
                floors += got;
                counts += want;
            }
            for (order, &[x, y, _]) in ORDERS.iter().enumerate() {
                let covers = Table::PHASE1[x].covers() | Table::PHASE1[y].covers();
                let want = classes(&rules, covers);
                let got = floor.mid_floor(order);
                assert!(
                    got <= want,
                    "round {round} order {order}: floor {got} > {want}"
                );
            }
        }
        // The floors are not trivially 1.
        assert!(
            floors * 3 > counts,
            "floors {floors} against {counts} classes"
        );
    }

    /// The phase-2 floors never pass the class counts the pairings come out with (the
    /// build checks each against its count in debug builds): random sets, and two
    /// rules whose source classes and port classes outnumber their source-and-ports
    /// classes (a floor taken from an operand's own count would pass it).
    #[test]
    fn phase2_floors_never_pass_the_pairings_class_counts() {
        let mut two = Rule::any(Action::Permit);
        two.src = Prefix::v4(Ipv4Addr::new(1, 0, 0, 0), 8);
        two.dst = Prefix::v4(Ipv4Addr::new(10, 0, 0, 0), 8);
        two.src_port = PortRange { lo: 0, hi: 20 };
        two.proto = Proto::Number(6);
        let mut other = two.clone();
        other.src = Prefix::v4(Ipv4Addr::new(2, 0, 0, 0), 8);
        other.src_port = PortRange { lo: 10, hi: 30 };
        assert!(super::super::Rfc::new(&[two, other]).is_some());
        let mut rng = StdRng::seed_from_u64(2323);
        for _ in 0..300 {
            let count = rng.gen_range(2..=40);
            let rules: Vec<Rule> = (0..count).map(|_| random_rule(&mut rng)).collect();
            // Builds (or refuses) without the debug check firing.
            let _ = super::super::Rfc::new(&rules);
        }
    }

    /// A rule set whose address halves alone make the tables too large is refused
    /// from the floors, before any table is built.
    #[test]
    fn host_pairs_past_the_budget_are_refused_up_front() {
        // 3,000 host sources and 3,000 host destinations, no two rules alike in a
        // half: each source half table has 3,000 classes, their cross 9M cells.
        let rules: Vec<Rule> = (0..3_000u32)
            .map(|i| {
                let mut rule = Rule::any(Action::Permit);
                rule.src = Prefix::v4(Ipv4Addr::from(i * 65_537), 32);
                rule.dst = Prefix::v4(Ipv4Addr::from(0x8000_0000 | (i * 65_537)), 32);
                rule
            })
            .collect();
        let inputs = Inputs::new(&rules);
        let floor = Floor::new(inputs.dimensions, &inputs.full);
        assert!(floor.get(Table::SrcHi) >= 3_000 && floor.get(Table::SrcLo) >= 3_000);
        assert!(!floor.fits(), "{} bytes", floor.bytes());
        assert!(super::super::Rfc::new(&rules).is_none());
    }
}
