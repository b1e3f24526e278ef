//! The compiled classifier (`acl::Compiled`: RFC tables for IPv4 where they fit, else
//! decision trees), the decision trees alone and the bit-vector classifier against the
//! linear oracle: random
//! IPv4, IPv6 and mixed rule sets with keys at rule boundaries, edge cases (empty set,
//! identical rules, /0, host prefixes, ports 0 and 65535, masked protocols), batch
//! results against single-key results, and a synthetic wildcard-heavy set of several
//! thousand rules for bounded build memory.

use ferrule_dataplane::acl::{
    Action, BitVectorClassifier, Classifier, Compiled, DecisionTreeClassifier, FlowKey,
    LinearClassifier, PortRange, Prefix, Proto, Rule, NO_MATCH,
};
use proptest::prelude::*;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::net::{Ipv4Addr, Ipv6Addr};

/// IPv4 base addresses rules and keys are drawn around, so prefixes overlap.
const BASES_V4: [u32; 6] = [
    0x0A00_0000,
    0x0A01_0203,
    0x0AFF_FFFF,
    0xC0A8_0101,
    0x0000_0000,
    0xFFFF_FFFF,
];

/// IPv6 base addresses: word boundaries, the ends of the space, an IPv4-mapped one.
const BASES_V6: [u128; 6] = [
    0x2001_0db8_0000_0000_0000_0000_0000_0000,
    0x2001_0db8_0000_0001_ffff_ffff_0000_0001,
    0x2001_0db8_ffff_ffff_ffff_ffff_ffff_ffff,
    0x0000_0000_0000_0000_0000_ffff_0a00_0001,
    0,
    u128::MAX,
];

/// Prefix lengths around the IPv6 word boundaries.
const LENS_V6: [u8; 12] = [0, 1, 31, 32, 33, 63, 64, 65, 96, 127, 128, 48];

/// Ports rule ranges are drawn from.
const PORTS: [u16; 8] = [0, 1, 53, 80, 443, 1024, 65534, 65535];

fn prefix_v4() -> impl Strategy<Value = Prefix> {
    prop_oneof![
        1 => Just(Prefix::Any),
        1 => Just(Prefix::v4(Ipv4Addr::from(0), 0)),
        2 => (prop::sample::select(&BASES_V4[..]), any::<u32>(), 0u8..=32).prop_map(
            |(base, noise, len)| Prefix::v4(Ipv4Addr::from(base ^ (noise & 0x0000_0F0F)), len)
        ),
        2 => (prop::sample::select(&BASES_V4[..]), prop::sample::select(&[8u8, 16, 24, 31, 32][..]))
            .prop_map(|(base, len)| Prefix::v4(Ipv4Addr::from(base), len)),
    ]
}

fn prefix_v6() -> impl Strategy<Value = Prefix> {
    prop_oneof![
        1 => Just(Prefix::Any),
        1 => Just(Prefix::v6(Ipv6Addr::UNSPECIFIED, 0)),
        3 => (prop::sample::select(&BASES_V6[..]), any::<u32>(), prop::sample::select(&LENS_V6[..]))
            .prop_map(|(base, noise, len)| {
                // Perturb bits in several words so sibling prefixes appear.
                let noise = u128::from(noise & 0x0F0F) << 64 | u128::from(noise & 0x0303);
                Prefix::v6(Ipv6Addr::from(base ^ noise), len)
            }),
        1 => (prop::sample::select(&BASES_V6[..]), 0u8..=128)
            .prop_map(|(base, len)| Prefix::v6(Ipv6Addr::from(base), len)),
    ]
}

fn port_range() -> impl Strategy<Value = PortRange> {
    prop_oneof![
        2 => Just(PortRange::ANY),
        2 => prop::sample::select(&PORTS[..]).prop_map(PortRange::single),
        3 => (prop::sample::select(&PORTS[..]), prop::sample::select(&PORTS[..]))
            .prop_map(|(a, b)| PortRange { lo: a.min(b), hi: a.max(b) }),
        1 => (any::<u16>(), any::<u16>())
            .prop_map(|(a, b)| PortRange { lo: a.min(b), hi: a.max(b) }),
    ]
}

fn proto() -> impl Strategy<Value = Proto> {
    prop_oneof![
        2 => Just(Proto::Any),
        3 => prop::sample::select(&[0u8, 1, 6, 17, 58, 132, 255][..]).prop_map(Proto::Number),
        2 => (any::<u8>(), any::<u8>()).prop_map(|(value, mask)| Proto::Masked { value, mask }),
    ]
}

/// Which address families a rule set holds.
#[derive(Debug, Clone, Copy)]
enum Families {
    V4,
    V6,
    Mixed,
}

fn rule(families: Families) -> impl Strategy<Value = Rule> {
    let prefixes = match families {
        Families::V4 => (prefix_v4(), prefix_v4()).boxed(),
        Families::V6 => (prefix_v6(), prefix_v6()).boxed(),
        Families::Mixed => prop_oneof![
            3 => (prefix_v4(), prefix_v4()),
            3 => (prefix_v6(), prefix_v6()),
            1 => (Just(Prefix::Any), Just(Prefix::Any)),
        ]
        .boxed(),
    };
    (prefixes, port_range(), port_range(), proto()).prop_map(
        |((src, dst), src_port, dst_port, proto)| Rule {
            action: Action::Permit,
            proto,
            src,
            dst,
            src_port,
            dst_port,
            origin: None,
        },
    )
}

/// A range's ends and their neighbours, within `0..=max`.
fn around(lo: u128, hi: u128, max: u128) -> Vec<u128> {
    let mut values = vec![lo, hi];
    values.extend(lo.checked_sub(1));
    values.extend(hi.checked_sub(1));
    if lo < max {
        values.push(lo + 1);
    }
    if hi < max {
        values.push(hi + 1);
    }
    values
}

/// Boundary values of a prefix in the given family's address space (`v6`), or the
/// ends of the space when the prefix is of the other family or any.
fn address_bounds(prefix: &Prefix, v6: bool) -> Vec<u128> {
    match (*prefix, v6) {
        (Prefix::V4 { addr, len }, false) => {
            let mask = u32::MAX.checked_shl(32 - u32::from(len)).unwrap_or(0);
            let lo = u32::from(addr) & mask;
            around(lo.into(), (lo | !mask).into(), u32::MAX.into())
        }
        (Prefix::V6 { addr, len }, true) => {
            let mask = u128::MAX.checked_shl(128 - u32::from(len)).unwrap_or(0);
            let lo = u128::from(addr) & mask;
            around(lo, lo | !mask, u128::MAX)
        }
        (_, false) => vec![0, u32::MAX.into(), 0x0A00_0001],
        (_, true) => vec![0, u128::MAX, BASES_V6[0] | 1],
    }
}

/// Keys built from rule boundaries, each field from a possibly different rule.
fn boundary_keys(rules: &[Rule], picks: &[(usize, [u16; 6])], families: Families) -> Vec<FlowKey> {
    if rules.is_empty() {
        return Vec::new();
    }
    picks
        .iter()
        .map(|&(index, choice)| {
            let pick = |offset: u16| &rules[(index + usize::from(offset)) % rules.len()];
            let select = |values: Vec<u128>, c: u16| values[usize::from(c) % values.len()];
            let v6 = match families {
                Families::V4 => false,
                Families::V6 => true,
                Families::Mixed => choice[5] % 2 == 1,
            };
            let src = select(address_bounds(&pick(choice[0]).src, v6), choice[0] >> 4);
            let dst = select(address_bounds(&pick(choice[1]).dst, v6), choice[1] >> 4);
            let sp = pick(choice[2]).src_port;
            let dp = pick(choice[3]).dst_port;
            let src_port = select(around(sp.lo.into(), sp.hi.into(), 65535), choice[2] >> 4) as u16;
            let dst_port = select(around(dp.lo.into(), dp.hi.into(), 65535), choice[3] >> 4) as u16;
            let proto = match pick(choice[4]).proto {
                Proto::Any => (choice[4] >> 4) as u8,
                Proto::Number(n) => n.wrapping_add(((choice[4] >> 4) % 3) as u8).wrapping_sub(1),
                Proto::Masked { value, mask } => (value & mask) | ((choice[4] >> 4) as u8 & !mask),
            };
            if v6 {
                FlowKey::v6(
                    0,
                    proto,
                    Ipv6Addr::from(src),
                    Ipv6Addr::from(dst),
                    src_port,
                    dst_port,
                )
            } else {
                FlowKey::v4(
                    0,
                    proto,
                    Ipv4Addr::from(src as u32),
                    Ipv4Addr::from(dst as u32),
                    src_port,
                    dst_port,
                )
            }
        })
        .collect()
}

/// Classifies `keys` with the tree, the bit-vector classifier (still selectable in
/// `ferrule-aclbench`) and the oracle: batches of several odd sizes and single keys
/// must all agree.
fn check(rules: Vec<Rule>, keys: &[FlowKey]) -> Result<(), TestCaseError> {
    let compiled = Compiled::new(&rules).map_err(|e| TestCaseError::fail(e.to_string()))?;
    let tree =
        DecisionTreeClassifier::new(&rules).map_err(|e| TestCaseError::fail(e.to_string()))?;
    let abv = BitVectorClassifier::new(&rules).map_err(|e| TestCaseError::fail(e.to_string()))?;
    let linear = LinearClassifier::new(rules);
    let mut want = vec![0u32; keys.len()];
    linear.classify_batch(keys, &mut want);
    let under: [(&str, &dyn Classifier); 3] = [
        (compiled.ipv4_lookup(), &compiled),
        ("tree", &tree),
        ("abv", &abv),
    ];
    for (name, classifier) in under {
        for batch in [1, 7, 32, 33, 37] {
            let mut got = vec![0u32; keys.len()];
            for (keys, out) in keys.chunks(batch).zip(got.chunks_mut(batch)) {
                classifier.classify_batch(keys, out);
            }
            for (index, key) in keys.iter().enumerate() {
                prop_assert_eq!(
                    got[index],
                    want[index],
                    "{} batch {} key {:?}",
                    name,
                    batch,
                    key
                );
            }
        }
    }
    for key in keys {
        prop_assert_eq!(
            abv.classify(key),
            linear.classify(key),
            "abv single key {:?}",
            key
        );
    }
    for (index, key) in keys.iter().enumerate() {
        let single = compiled.classify(key);
        prop_assert_eq!(single, linear.classify(key), "single key {:?}", key);
        prop_assert_eq!(tree.classify(key), single, "tree single key {:?}", key);
        prop_assert_eq!(
            single.map_or(NO_MATCH, |rule| rule as u32),
            want[index],
            "single vs batch {:?}",
            key
        );
    }
    Ok(())
}

/// Random keys of the family mix, for keys off the rule boundaries.
fn random_keys(raw: &[(u128, u128, u8, u16, u16, bool)], families: Families) -> Vec<FlowKey> {
    raw.iter()
        .map(|&(s, d, proto, sp, dp, v6)| {
            let v6 = match families {
                Families::V4 => false,
                Families::V6 => true,
                Families::Mixed => v6,
            };
            if v6 {
                FlowKey::v6(0, proto, Ipv6Addr::from(s), Ipv6Addr::from(d), sp, dp)
            } else {
                let (s, d) = (s as u32, d as u32);
                FlowKey::v4(0, proto, Ipv4Addr::from(s), Ipv4Addr::from(d), sp, dp)
            }
        })
        .collect()
}

fn random_raw() -> impl Strategy<Value = Vec<(u128, u128, u8, u16, u16, bool)>> {
    prop::collection::vec(
        (
            any::<u128>(),
            any::<u128>(),
            any::<u8>(),
            any::<u16>(),
            any::<u16>(),
            any::<bool>(),
        ),
        20,
    )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn ipv4_matches_linear_oracle(
        rules in prop::collection::vec(rule(Families::V4), 0..300),
        picks in prop::collection::vec((any::<usize>(), any::<[u16; 6]>()), 200),
        raw in random_raw(),
    ) {
        let mut keys = boundary_keys(&rules, &picks, Families::V4);
        keys.extend(random_keys(&raw, Families::V4));
        check(rules, &keys)?;
    }

    #[test]
    fn ipv6_matches_linear_oracle(
        rules in prop::collection::vec(rule(Families::V6), 0..300),
        picks in prop::collection::vec((any::<usize>(), any::<[u16; 6]>()), 200),
        raw in random_raw(),
    ) {
        let mut keys = boundary_keys(&rules, &picks, Families::V6);
        keys.extend(random_keys(&raw, Families::V6));
        check(rules, &keys)?;
    }

    #[test]
    fn mixed_families_match_linear_oracle(
        rules in prop::collection::vec(rule(Families::Mixed), 0..300),
        picks in prop::collection::vec((any::<usize>(), any::<[u16; 6]>()), 200),
        raw in random_raw(),
    ) {
        let mut keys = boundary_keys(&rules, &picks, Families::Mixed);
        keys.extend(random_keys(&raw, Families::Mixed));
        check(rules, &keys)?;
    }

    #[test]
    fn many_identical_rules_match_linear_oracle(
        template in rule(Families::Mixed),
        copies in 1usize..200,
        others in prop::collection::vec(rule(Families::Mixed), 0..20),
        picks in prop::collection::vec((any::<usize>(), any::<[u16; 6]>()), 100),
    ) {
        let mut rules = others;
        let at = rules.len() / 2;
        rules.splice(at..at, vec![template; copies]);
        let keys = boundary_keys(&rules, &picks, Families::Mixed);
        check(rules, &keys)?;
    }
}

fn permit(
    src: Prefix,
    dst: Prefix,
    proto: Proto,
    src_port: PortRange,
    dst_port: PortRange,
) -> Rule {
    Rule {
        action: Action::Permit,
        proto,
        src,
        dst,
        src_port,
        dst_port,
        origin: None,
    }
}

#[test]
fn empty_rule_set_matches_nothing() {
    let tree = Compiled::new(&[]).unwrap();
    let keys = [
        FlowKey::v4(0, 6, Ipv4Addr::LOCALHOST, Ipv4Addr::LOCALHOST, 1, 2),
        FlowKey::v6(0, 6, Ipv6Addr::LOCALHOST, Ipv6Addr::LOCALHOST, 1, 2),
    ];
    let mut out = [0u32; 2];
    tree.classify_batch(&keys, &mut out);
    assert_eq!(out, [NO_MATCH, NO_MATCH]);
    assert_eq!(tree.classify(&keys[0]), None);
    assert!(tree.memory_bytes() > 0);
}

#[test]
fn families_never_cross_and_any_matches_both() {
    let v4_zero = Prefix::v4(Ipv4Addr::UNSPECIFIED, 0);
    let v6_zero = Prefix::v6(Ipv6Addr::UNSPECIFIED, 0);
    let mapped = Prefix::v6("::ffff:10.0.0.0".parse().unwrap(), 104);
    let rules = vec![
        permit(
            v4_zero,
            Prefix::Any,
            Proto::TCP,
            PortRange::ANY,
            PortRange::ANY,
        ),
        permit(
            Prefix::Any,
            v6_zero,
            Proto::TCP,
            PortRange::ANY,
            PortRange::ANY,
        ),
        permit(
            mapped,
            Prefix::Any,
            Proto::UDP,
            PortRange::ANY,
            PortRange::ANY,
        ),
        permit(
            Prefix::Any,
            Prefix::Any,
            Proto::Any,
            PortRange::single(0),
            PortRange::single(65535),
        ),
    ];
    let tree = DecisionTreeClassifier::new(&rules).unwrap();
    let k4 = |proto, sp, dp| {
        FlowKey::v4(
            0,
            proto,
            Ipv4Addr::new(10, 0, 0, 1),
            Ipv4Addr::new(10, 0, 0, 2),
            sp,
            dp,
        )
    };
    let k6 = |proto, sp, dp| {
        FlowKey::v6(
            0,
            proto,
            "::ffff:10.0.0.1".parse().unwrap(),
            "2001:db8::1".parse().unwrap(),
            sp,
            dp,
        )
    };
    assert_eq!(tree.classify(&k4(6, 1, 1)), Some(0));
    assert_eq!(tree.classify(&k6(6, 1, 1)), Some(1));
    // The IPv4-mapped IPv6 prefix matches the IPv6 key only.
    assert_eq!(tree.classify(&k6(17, 1, 1)), Some(2));
    assert_eq!(tree.classify(&k4(17, 1, 1)), None);
    assert_eq!(tree.classify(&k4(17, 0, 65535)), Some(3));
    assert_eq!(tree.classify(&k6(17, 0, 65535)), Some(2));
    assert_eq!(tree.classify(&k6(1, 0, 65535)), Some(3));
    assert_eq!(tree.classify(&k6(1, 0, 65534)), None);
}

#[test]
fn host_prefixes_and_edges() {
    let host6: Ipv6Addr = "2001:db8::ffff:ffff".parse().unwrap();
    let rules = vec![
        permit(
            Prefix::v4(Ipv4Addr::BROADCAST, 32),
            Prefix::Any,
            Proto::Any,
            PortRange::ANY,
            PortRange::single(65535),
        ),
        permit(
            Prefix::Any,
            Prefix::v4(Ipv4Addr::UNSPECIFIED, 32),
            Proto::Masked {
                value: 0x80,
                mask: 0x80,
            },
            PortRange::ANY,
            PortRange::ANY,
        ),
        permit(
            Prefix::v6(host6, 128),
            Prefix::Any,
            Proto::Any,
            PortRange::ANY,
            PortRange::ANY,
        ),
        permit(
            Prefix::Any,
            Prefix::Any,
            Proto::Any,
            PortRange::ANY,
            PortRange::ANY,
        ),
    ];
    let tree = Compiled::new(&rules).unwrap();
    let key = |src: [u8; 4], dst: [u8; 4], proto, dst_port| {
        FlowKey::v4(
            0,
            proto,
            Ipv4Addr::from(src),
            Ipv4Addr::from(dst),
            0,
            dst_port,
        )
    };
    assert_eq!(tree.classify(&key([255; 4], [1; 4], 6, 65535)), Some(0));
    assert_eq!(tree.classify(&key([255; 4], [1; 4], 6, 65534)), Some(3));
    assert_eq!(tree.classify(&key([1; 4], [0; 4], 0x81, 0)), Some(1));
    assert_eq!(tree.classify(&key([1; 4], [0; 4], 0x7f, 0)), Some(3));
    let v6 = |src: Ipv6Addr| FlowKey::v6(0, 6, src, Ipv6Addr::LOCALHOST, 0, 65535);
    assert_eq!(tree.classify(&v6(host6)), Some(2));
    let next = Ipv6Addr::from(u128::from(host6) + 1);
    assert_eq!(tree.classify(&v6(next)), Some(3));
}

/// A firewall-like set: most rules have a wildcard or short prefix on one or both
/// addresses, port ranges are any, exact, or wide, protocols any or exact.
fn wildcard_heavy(count: usize, rng: &mut StdRng) -> Vec<Rule> {
    let prefix = |rng: &mut StdRng| -> Prefix {
        match rng.gen_range(0..10) {
            0..=3 => Prefix::Any,
            4 | 5 => Prefix::v4(Ipv4Addr::from(rng.gen::<u32>()), rng.gen_range(1..=16)),
            6 | 7 => Prefix::v4(
                Ipv4Addr::from(rng.gen::<u32>() & 0x0AFF_FFFF),
                rng.gen_range(16..=28),
            ),
            _ => Prefix::v4(Ipv4Addr::from(rng.gen::<u32>()), 32),
        }
    };
    let port = |rng: &mut StdRng| -> PortRange {
        match rng.gen_range(0..8) {
            0..=3 => PortRange::ANY,
            4 => PortRange {
                lo: 1024,
                hi: 65535,
            },
            5 => PortRange { lo: 0, hi: 1023 },
            6 => {
                let lo = rng.gen::<u16>();
                PortRange {
                    lo,
                    hi: lo.saturating_add(rng.gen_range(0..2000)),
                }
            }
            _ => PortRange::single(
                *[22, 53, 80, 443, 8080, 6443]
                    .get(rng.gen_range(0..6))
                    .unwrap(),
            ),
        }
    };
    (0..count)
        .map(|_| {
            let proto = match rng.gen_range(0..4) {
                0 => Proto::Any,
                1 => Proto::UDP,
                _ => Proto::TCP,
            };
            let src = prefix(rng);
            let dst = prefix(rng);
            let src_port = port(rng);
            let dst_port = port(rng);
            permit(src, dst, proto, src_port, dst_port)
        })
        .collect()
}

#[test]
fn wildcard_heavy_set_builds_bounded_and_matches_oracle() {
    let mut rng = StdRng::seed_from_u64(0x5EED_F1BE);
    let rules = wildcard_heavy(4000, &mut rng);
    let tree = Compiled::new(&rules).unwrap();
    // Linear in the rules: far below the hard limit.
    assert!(
        tree.memory_bytes() < 64 << 20,
        "{} bytes for {} rules",
        tree.memory_bytes(),
        rules.len()
    );
    // Keys near rules (a field from one rule each) and random ones.
    let keys: Vec<FlowKey> = (0..3000)
        .map(|i| {
            let rule = &rules[rng.gen_range(0..rules.len())];
            let addr = |prefix: &Prefix, rng: &mut StdRng| match *prefix {
                Prefix::V4 { addr, len } if i % 4 != 0 => {
                    let host = rng.gen::<u32>().checked_shr(u32::from(len)).unwrap_or(0);
                    Ipv4Addr::from(u32::from(addr) | host)
                }
                _ => Ipv4Addr::from(rng.gen::<u32>()),
            };
            let port = |range: PortRange, rng: &mut StdRng| {
                if i % 3 == 0 {
                    rng.gen()
                } else {
                    rng.gen_range(range.lo..=range.hi)
                }
            };
            let proto = [6, 17, 1][rng.gen_range(0..3)];
            FlowKey::v4(
                0,
                proto,
                addr(&rule.src, &mut rng),
                addr(&rule.dst, &mut rng),
                port(rule.src_port, &mut rng),
                port(rule.dst_port, &mut rng),
            )
        })
        .collect();
    let linear = LinearClassifier::new(rules);
    let mut got = vec![0u32; keys.len()];
    for (keys, out) in keys.chunks(32).zip(got.chunks_mut(32)) {
        tree.classify_batch(keys, out);
    }
    for (key, got) in keys.iter().zip(&got) {
        let want = linear.classify(key).map_or(NO_MATCH, |rule| rule as u32);
        assert_eq!(*got, want, "{key:?}");
    }
}

#[test]
fn classifier_is_send_and_sync() {
    fn shared<T: Send + Sync>() {}
    shared::<Compiled>();
    shared::<std::sync::Arc<Compiled>>();
}

#[test]
fn wide_and_exact_rules_at_the_edges() {
    let mut host = Rule::any(Action::Deny);
    host.src = Prefix::v4(Ipv4Addr::new(255, 255, 255, 255), 32);
    host.dst_port = PortRange::single(65535);
    let mut zero = Rule::any(Action::Deny);
    zero.dst = Prefix::v4(Ipv4Addr::new(0, 0, 0, 0), 32);
    zero.proto = Proto::Masked {
        value: 0x80,
        mask: 0x80,
    };
    let rules = vec![host, zero, Rule::any(Action::Permit)];
    let key = |src: [u8; 4], dst: [u8; 4], proto, dst_port| {
        FlowKey::v4(
            0,
            proto,
            Ipv4Addr::from(src),
            Ipv4Addr::from(dst),
            0,
            dst_port,
        )
    };
    let cases = [
        (key([255; 4], [1; 4], 6, 65535), Some(0)),
        (key([255; 4], [1; 4], 6, 65534), Some(2)),
        (key([1; 4], [0; 4], 0x81, 0), Some(1)),
        (key([1; 4], [0; 4], 0x7f, 0), Some(2)),
        (
            FlowKey::v6(0, 6, Ipv6Addr::LOCALHOST, Ipv6Addr::LOCALHOST, 0, 65535),
            Some(2),
        ),
    ];
    let tree = Compiled::new(&rules).unwrap();
    let abv = BitVectorClassifier::new(&rules).unwrap();
    for (key, want) in cases {
        assert_eq!(tree.classify(&key), want, "tree {key:?}");
        assert_eq!(abv.classify(&key), want, "abv {key:?}");
    }
}
