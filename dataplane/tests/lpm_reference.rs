//! Checks `Lpm4` and `Lpm6` against a naive reference (a list of routes, longest match by
//! scanning it) on random nested route tables, random insert/remove interleavings,
//! iteration, clones and batch lookups.

use ferrule_dataplane::lpm::{Lpm4, Lpm6, NextHop, MAX_NEXT_HOP, NO_ROUTE};
use proptest::prelude::*;
use proptest::sample::Index;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::net::{Ipv4Addr, Ipv6Addr};

/// The netmask of a /`len` prefix of a `bits`-bit address, in the low `bits` of a u128.
fn mask(bits: u8, len: u8) -> u128 {
    let all = if bits == 128 {
        u128::MAX
    } else {
        (1u128 << bits) - 1
    };
    let host = all.checked_shr(u32::from(len)).unwrap_or(0);
    all & !host
}

/// The oracle: every route in a list, the longest covering one found by a scan.
#[derive(Clone, Default)]
struct Reference {
    bits: u8,
    routes: Vec<(u128, u8, NextHop)>,
}

impl Reference {
    fn new(bits: u8) -> Self {
        Reference {
            bits,
            routes: Vec::new(),
        }
    }

    fn insert(&mut self, prefix: u128, len: u8, nh: NextHop) -> Option<NextHop> {
        let p = prefix & mask(self.bits, len);
        match self.routes.iter_mut().find(|r| r.0 == p && r.1 == len) {
            Some(r) => Some(std::mem::replace(&mut r.2, nh)),
            None => {
                self.routes.push((p, len, nh));
                None
            }
        }
    }

    fn remove(&mut self, prefix: u128, len: u8) -> Option<NextHop> {
        let p = prefix & mask(self.bits, len);
        let i = self.routes.iter().position(|r| r.0 == p && r.1 == len)?;
        Some(self.routes.swap_remove(i).2)
    }

    fn lookup(&self, addr: u128) -> Option<NextHop> {
        self.routes
            .iter()
            .filter(|r| addr & mask(self.bits, r.1) == r.0)
            .max_by_key(|r| r.1)
            .map(|r| r.2)
    }

    fn sorted(&self) -> Vec<(u128, u8, NextHop)> {
        let mut all = self.routes.clone();
        all.sort_unstable_by_key(|r| (r.0, r.1));
        all
    }

    /// Addresses at and around the edges of every route, plus one inside each.
    fn probes(&self) -> Vec<u128> {
        let all = mask(self.bits, self.bits);
        let mut out = Vec::new();
        for (i, &(p, len, _)) in self.routes.iter().enumerate() {
            let host = all & !mask(self.bits, len);
            let last = p | host;
            let inside = p | (host & (i as u128).wrapping_mul(0x9e37_79b9_7f4a_7c15_f39c_c060));
            out.extend([
                p,
                last,
                p.wrapping_sub(1) & all,
                last.wrapping_add(1) & all,
                inside,
            ]);
        }
        out
    }
}

/// A route: (prefix, length, next hop).
type Route<A> = (A, u8, NextHop);

fn next_hop() -> impl Strategy<Value = NextHop> {
    // Few distinct next hops too: sibling routes with equal next hops make groups uniform.
    prop_oneof![6 => 0u32..1000, 4 => 0u32..3, 1 => Just(MAX_NEXT_HOP)]
}

/// Routes clustered around a few anchors, so they nest and overlap; duplicates happen.
/// A third of them split an earlier route (one half of it, one bit longer), which makes
/// sibling pairs and chains of nested routes.
fn routes(bits: u8, max_routes: usize) -> impl Strategy<Value = Vec<Route<u128>>> {
    let len = prop_oneof![
        4 => 0..=bits,
        1 => Just(0),
        1 => Just(bits),
        1 => Just(bits / 2),
        1 => (bits / 2 - 4)..=(bits / 2 + 4),
    ];
    let all = mask(bits, bits);
    let raw = (
        any::<Index>(),
        any::<u128>(),
        0..=bits,
        len,
        next_hop(),
        prop::option::weighted(0.35, (any::<Index>(), any::<bool>())),
    );
    (
        prop::collection::vec(any::<u128>(), 1..5),
        prop::collection::vec(raw, 0..max_routes),
    )
        .prop_map(move |(anchors, raw)| {
            let mut out: Vec<Route<u128>> = Vec::with_capacity(raw.len());
            for (ai, noise, keep, len, nh, split) in raw {
                let route = match split {
                    Some((parent, upper)) if !out.is_empty() => {
                        let (p, plen, _) = *parent.get(&out);
                        let len = (plen + 1).min(bits);
                        let half = if upper && plen < bits {
                            1u128 << (bits - len)
                        } else {
                            0
                        };
                        ((p & mask(bits, plen)) | half, len, nh)
                    }
                    _ => {
                        let anchor = *ai.get(&anchors) & all;
                        let m = mask(bits, keep);
                        ((anchor & m) | (noise & all & !m), len, nh)
                    }
                };
                out.push(route);
            }
            out
        })
}

/// A route and some of its descendants down to three bits longer (sibling pairs with
/// equal next hops, which make whole groups uniform), in random order, then removed in
/// another random order.
fn family(bits: u8) -> impl Strategy<Value = (Vec<Route<u128>>, Vec<usize>)> {
    (
        any::<u128>(),
        0..=bits - 3,
        prop::collection::vec((any::<bool>(), 0u32..2), 15),
    )
        .prop_flat_map(move |(anchor, len, picks)| {
            let mut routes = Vec::new();
            let mut k = 0;
            for d in 0..=3u8 {
                for i in 0..(1u128 << d) {
                    let (take, nh) = picks[k];
                    k += 1;
                    if take || d == 0 {
                        let sub = i.checked_shl(u32::from(bits - len - d)).unwrap_or(0);
                        let p = (anchor & mask(bits, len)) | sub;
                        routes.push((p & mask(bits, bits), len + d, nh));
                    }
                }
            }
            let order: Vec<usize> = (0..routes.len()).collect();
            (Just(routes).prop_shuffle(), Just(order).prop_shuffle())
        })
}

fn check_family<T: Table>(routes: &[Route<u128>], order: &[usize]) -> Result<(), TestCaseError> {
    let mut t = T::new();
    let mut r = Reference::new(T::BITS);
    for &(p, len, nh) in routes {
        prop_assert_eq!(t.insert(p, len, nh), r.insert(p, len, nh));
        assert_same(&t, &r, &[])?;
    }
    for &i in order {
        let (p, len, nh) = routes[i];
        prop_assert_eq!(t.remove(p, len), Some(nh));
        r.remove(p, len);
        assert_same(&t, &r, &[])?;
    }
    prop_assert_eq!(t.groups(), 0);
    Ok(())
}

/// What a test does to a table: insert a route, remove one that exists, or remove a
/// route that probably does not.
#[derive(Debug, Clone)]
enum Op {
    Insert(Route<u128>),
    RemoveExisting(Index),
    Remove(Route<u128>),
}

fn ops(bits: u8, max: usize) -> impl Strategy<Value = Vec<Op>> {
    (
        routes(bits, max),
        prop::collection::vec((0..6u8, any::<Index>()), 0..max),
    )
        .prop_map(|(routes, kinds)| {
            let mut out = Vec::new();
            for (i, r) in routes.into_iter().enumerate() {
                out.push(Op::Insert(r));
                if let Some(&(kind, idx)) = kinds.get(i) {
                    match kind {
                        0 | 1 => out.push(Op::RemoveExisting(idx)),
                        2 => out.push(Op::Remove(r)),
                        _ => {}
                    }
                }
            }
            out
        })
}

/// The common interface of both tables, for the generic checks below.
trait Table: Clone {
    const BITS: u8;
    fn new() -> Self;
    fn insert(&mut self, prefix: u128, len: u8, nh: NextHop) -> Option<NextHop>;
    fn remove(&mut self, prefix: u128, len: u8) -> Option<NextHop>;
    fn get(&self, prefix: u128, len: u8) -> Option<NextHop>;
    fn lookup(&self, addr: u128) -> Option<NextHop>;
    fn lookup_raw(&self, addr: u128) -> u32;
    fn batch(&self, addrs: &[u128], out: &mut [u32]);
    fn routes(&self) -> Vec<Route<u128>>;
    fn len(&self) -> usize;
    fn groups(&self) -> usize;
}

impl Table for Lpm4 {
    const BITS: u8 = 32;
    fn new() -> Self {
        Lpm4::new()
    }
    fn insert(&mut self, prefix: u128, len: u8, nh: NextHop) -> Option<NextHop> {
        Lpm4::insert(self, Ipv4Addr::from(prefix as u32), len, nh).expect("valid route")
    }
    fn remove(&mut self, prefix: u128, len: u8) -> Option<NextHop> {
        Lpm4::remove(self, Ipv4Addr::from(prefix as u32), len)
    }
    fn get(&self, prefix: u128, len: u8) -> Option<NextHop> {
        Lpm4::get(self, Ipv4Addr::from(prefix as u32), len)
    }
    fn lookup(&self, addr: u128) -> Option<NextHop> {
        Lpm4::lookup(self, Ipv4Addr::from(addr as u32))
    }
    fn lookup_raw(&self, addr: u128) -> u32 {
        self.lookup_u32(addr as u32)
    }
    fn batch(&self, addrs: &[u128], out: &mut [u32]) {
        let a: Vec<u32> = addrs.iter().map(|&x| x as u32).collect();
        self.lookup_batch(&a, out);
    }
    fn routes(&self) -> Vec<Route<u128>> {
        self.iter()
            .map(|(p, l, nh)| (u128::from(u32::from(p)), l, nh))
            .collect()
    }
    fn len(&self) -> usize {
        Lpm4::len(self)
    }
    fn groups(&self) -> usize {
        self.tbl8_groups()
    }
}

impl Table for Lpm6 {
    const BITS: u8 = 128;
    fn new() -> Self {
        Lpm6::new()
    }
    fn insert(&mut self, prefix: u128, len: u8, nh: NextHop) -> Option<NextHop> {
        Lpm6::insert(self, Ipv6Addr::from(prefix), len, nh).expect("valid route")
    }
    fn remove(&mut self, prefix: u128, len: u8) -> Option<NextHop> {
        Lpm6::remove(self, Ipv6Addr::from(prefix), len)
    }
    fn get(&self, prefix: u128, len: u8) -> Option<NextHop> {
        Lpm6::get(self, Ipv6Addr::from(prefix), len)
    }
    fn lookup(&self, addr: u128) -> Option<NextHop> {
        Lpm6::lookup(self, Ipv6Addr::from(addr))
    }
    fn lookup_raw(&self, addr: u128) -> u32 {
        self.lookup_u128(addr)
    }
    fn batch(&self, addrs: &[u128], out: &mut [u32]) {
        self.lookup_batch(addrs, out);
    }
    fn routes(&self) -> Vec<Route<u128>> {
        self.iter()
            .map(|(p, l, nh)| (u128::from(p), l, nh))
            .collect()
    }
    fn len(&self) -> usize {
        Lpm6::len(self)
    }
    fn groups(&self) -> usize {
        Lpm6::groups(self)
    }
}

/// Every probe address (plus `extra`) looks up the same in `t` and `r`, one at a time
/// and batched.
fn assert_same<T: Table>(t: &T, r: &Reference, extra: &[u128]) -> Result<(), TestCaseError> {
    let all = mask(T::BITS, T::BITS);
    let mut addrs = r.probes();
    addrs.extend(extra.iter().map(|&a| a & all));
    let mut batch = vec![0; addrs.len()];
    t.batch(&addrs, &mut batch);
    for (&addr, &b) in addrs.iter().zip(&batch) {
        let want = r.lookup(addr);
        prop_assert_eq!(t.lookup(addr), want, "lookup {:#x}", addr);
        prop_assert_eq!(t.lookup_raw(addr), want.unwrap_or(NO_ROUTE));
        prop_assert_eq!(b, want.unwrap_or(NO_ROUTE), "batch {:#x}", addr);
    }
    prop_assert_eq!(t.len(), r.routes.len());
    Ok(())
}

fn check_table<T: Table>(routes: &[Route<u128>], extra: &[u128]) -> Result<(), TestCaseError> {
    let mut t = T::new();
    let mut r = Reference::new(T::BITS);
    for &(p, len, nh) in routes {
        prop_assert_eq!(t.insert(p, len, nh), r.insert(p, len, nh));
    }
    assert_same(&t, &r, extra)?;
    prop_assert_eq!(t.routes(), r.sorted());
    for &(p, len, nh) in &r.routes {
        prop_assert_eq!(t.get(p, len), Some(nh));
    }
    Ok(())
}

fn check_ops<T: Table>(ops: &[Op], extra: &[u128]) -> Result<(), TestCaseError> {
    let mut t = T::new();
    let mut r = Reference::new(T::BITS);
    for op in ops {
        match *op {
            Op::Insert((p, len, nh)) => prop_assert_eq!(t.insert(p, len, nh), r.insert(p, len, nh)),
            Op::Remove((p, len, _)) => prop_assert_eq!(t.remove(p, len), r.remove(p, len)),
            Op::RemoveExisting(idx) => {
                if !r.routes.is_empty() {
                    let (p, len, nh) = *idx.get(&r.routes);
                    prop_assert_eq!(r.remove(p, len), Some(nh));
                    prop_assert_eq!(t.remove(p, len), Some(nh));
                }
            }
        }
        assert_same(&t, &r, extra)?;
    }
    prop_assert_eq!(t.routes(), r.sorted());
    // Take everything out, shortest (most covering) routes first.
    let mut rest = r.sorted();
    rest.sort_by_key(|x| x.1);
    for (p, len, nh) in rest {
        prop_assert_eq!(t.remove(p, len), Some(nh));
        r.remove(p, len);
    }
    assert_same(&t, &r, extra)?;
    prop_assert_eq!(t.len(), 0);
    prop_assert_eq!(t.groups(), 0, "every group folds once its routes are gone");
    Ok(())
}

/// Removing a route that covers others and adding it back restores the lookups.
fn check_remove_cover_and_readd<T: Table>(
    routes: &[Route<u128>],
    extra: &[u128],
) -> Result<(), TestCaseError> {
    let mut t = T::new();
    let mut r = Reference::new(T::BITS);
    for &(p, len, nh) in routes {
        t.insert(p, len, nh);
        r.insert(p, len, nh);
    }
    let mut by_len = r.sorted();
    by_len.sort_by_key(|x| x.1);
    for (p, len, nh) in by_len {
        prop_assert_eq!(t.remove(p, len), r.remove(p, len));
        assert_same(&t, &r, extra)?;
        prop_assert_eq!(t.insert(p, len, nh), None);
        r.insert(p, len, nh);
        assert_same(&t, &r, extra)?;
    }
    Ok(())
}

fn check_clone<T: Table>(routes: &[Route<u128>], extra: &[u128]) -> Result<(), TestCaseError> {
    let mut t = T::new();
    let mut r = Reference::new(T::BITS);
    for &(p, len, nh) in routes {
        t.insert(p, len, nh);
        r.insert(p, len, nh);
    }
    let mut c = t.clone();
    let before = r.clone();
    let mut rc = r.clone();
    // Change the clone: drop half its routes, re-point the rest, add a default.
    for (i, &(p, len, nh)) in before.routes.iter().enumerate() {
        if i % 2 == 0 {
            c.remove(p, len);
            rc.remove(p, len);
        } else {
            c.insert(p, len, (nh + 1) % 1000);
            rc.insert(p, len, (nh + 1) % 1000);
        }
    }
    c.insert(0, 0, 4242);
    rc.insert(0, 0, 4242);
    assert_same(&c, &rc, extra)?;
    assert_same(&t, &before, extra)?;
    // And the source: its changes do not leak into the clone.
    for &(p, len, _) in &before.routes {
        t.remove(p, len);
        r.remove(p, len);
    }
    assert_same(&t, &r, extra)?;
    assert_same(&c, &rc, extra)?;
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 128,
        // Failing cases are printed; no regression files in the source tree.
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    #[test]
    fn v4_tables_match_reference(routes in routes(32, 150), extra in prop::collection::vec(any::<u128>(), 0..64)) {
        check_table::<Lpm4>(&routes, &extra)?;
    }

    #[test]
    fn v6_tables_match_reference(routes in routes(128, 150), extra in prop::collection::vec(any::<u128>(), 0..64)) {
        check_table::<Lpm6>(&routes, &extra)?;
    }

    #[test]
    fn v4_insert_remove_interleavings(ops in ops(32, 60), extra in prop::collection::vec(any::<u128>(), 0..16)) {
        check_ops::<Lpm4>(&ops, &extra)?;
    }

    #[test]
    fn v6_insert_remove_interleavings(ops in ops(128, 60), extra in prop::collection::vec(any::<u128>(), 0..16)) {
        check_ops::<Lpm6>(&ops, &extra)?;
    }

    #[test]
    fn v4_route_families((routes, order) in family(32)) {
        check_family::<Lpm4>(&routes, &order)?;
    }

    #[test]
    fn v6_route_families((routes, order) in family(128)) {
        check_family::<Lpm6>(&routes, &order)?;
    }

    #[test]
    fn v4_remove_covering_and_readd(routes in routes(32, 40), extra in prop::collection::vec(any::<u128>(), 0..16)) {
        check_remove_cover_and_readd::<Lpm4>(&routes, &extra)?;
    }

    #[test]
    fn v6_remove_covering_and_readd(routes in routes(128, 40), extra in prop::collection::vec(any::<u128>(), 0..16)) {
        check_remove_cover_and_readd::<Lpm6>(&routes, &extra)?;
    }

    #[test]
    fn v4_clone_is_independent(routes in routes(32, 80), extra in prop::collection::vec(any::<u128>(), 0..16)) {
        check_clone::<Lpm4>(&routes, &extra)?;
    }

    #[test]
    fn v6_clone_is_independent(routes in routes(128, 80), extra in prop::collection::vec(any::<u128>(), 0..16)) {
        check_clone::<Lpm6>(&routes, &extra)?;
    }
}

/// Random routes and addresses around them from a seeded generator, for the batch test.
fn seeded_table<T: Table>(seed: u64, n: usize) -> (T, Vec<u128>) {
    let mut rng = StdRng::seed_from_u64(seed);
    let all = mask(T::BITS, T::BITS);
    let mut t = T::new();
    let mut r = Reference::new(T::BITS);
    let anchors: Vec<u128> = (0..4).map(|_| rng.gen::<u128>() & all).collect();
    for _ in 0..n {
        let anchor = anchors[rng.gen_range(0..anchors.len())];
        let keep = rng.gen_range(0..=T::BITS);
        let m = mask(T::BITS, keep);
        let p = (anchor & m) | (rng.gen::<u128>() & all & !m);
        let len = rng.gen_range(0..=T::BITS);
        let nh = rng.gen_range(0..1000);
        t.insert(p, len, nh);
        r.insert(p, len, nh);
    }
    let mut addrs = r.probes();
    addrs.extend((0..200).map(|_| rng.gen::<u128>() & all));
    (t, addrs)
}

fn check_batches<T: Table>(seed: u64) {
    let (t, addrs) = seeded_table::<T>(seed, 300);
    let mut rng = StdRng::seed_from_u64(seed ^ 0xba7c);
    for n in 0..=300 {
        let batch: Vec<u128> = (0..n)
            .map(|_| addrs[rng.gen_range(0..addrs.len())])
            .collect();
        let mut out = vec![7u32; n + 3];
        t.batch(&batch, &mut out);
        for (i, &a) in batch.iter().enumerate() {
            assert_eq!(out[i], t.lookup_raw(a), "batch of {n}, lane {i}, {a:#x}");
        }
        assert_eq!(
            &out[n..],
            &[7, 7, 7],
            "batch of {n} wrote past its addresses"
        );
    }
}

#[test]
fn v4_batch_equals_lookup_for_every_length() {
    for seed in 0..4 {
        check_batches::<Lpm4>(seed);
    }
}

#[test]
fn v6_batch_equals_lookup_for_every_length() {
    for seed in 0..4 {
        check_batches::<Lpm6>(seed);
    }
}

#[test]
#[should_panic]
fn batch_output_shorter_than_input_panics() {
    let t = Lpm4::new();
    t.lookup_batch(&[1, 2, 3], &mut [0; 2]);
}

#[test]
fn short_prefixes_keep_memory_small() {
    let mut t4 = Lpm4::new();
    let mut t6 = Lpm6::new();
    for len in 0..8u8 {
        for i in 0..(1u32 << len) {
            let p4 = Ipv4Addr::from(i.checked_shl(32 - u32::from(len)).unwrap_or(0));
            t4.insert(p4, len, i).unwrap();
            let p6 = Ipv6Addr::from(u128::from(i).checked_shl(128 - u32::from(len)).unwrap_or(0));
            t6.insert(p6, len, i).unwrap();
        }
    }
    assert_eq!(t4.len(), 255);
    assert!(t4.memory_bytes() < 64 << 10, "{} bytes", t4.memory_bytes());
    assert!(t6.memory_bytes() < 64 << 10, "{} bytes", t6.memory_bytes());
    assert!(t4.clone().memory_bytes() < 64 << 10);
    assert_eq!(t4.lookup(Ipv4Addr::new(255, 1, 2, 3)), Some(127));
    assert_eq!(t6.lookup("fe80::1".parse().unwrap()), Some(127));
    // One /24 writes one 4 KiB page of tbl24, not 64 MiB.
    t4.insert(Ipv4Addr::new(10, 1, 2, 0), 24, 1).unwrap();
    assert!(t4.memory_bytes() < 72 << 10, "{} bytes", t4.memory_bytes());
}

#[test]
fn tables_are_send_and_sync() {
    fn check<T: Send + Sync + Clone + 'static>() {}
    check::<Lpm4>();
    check::<Lpm6>();
}
