//! The aggregated bit vector classifier against the linear oracle (random rule sets,
//! keys at rule boundaries, mixed IPv4/IPv6) and against `rte_acl`'s results on the
//! shared ClassBench sets (`../shared/data/classbench/`, beside the repo).

use ferrule_dataplane::acl::classbench;
use ferrule_dataplane::acl::{
    Action, BitVectorClassifier, Classifier, FlowKey, LinearClassifier, PortRange, Prefix, Proto,
    Rule, NO_MATCH,
};
use proptest::prelude::*;
use std::net::{Ipv4Addr, Ipv6Addr};
use std::path::PathBuf;

/// Base addresses rules and keys are drawn around, so prefixes overlap.
const BASES: [u32; 6] = [
    0x0A00_0000,
    0x0A01_0203,
    0x0AFF_FFFF,
    0xC0A8_0101,
    0x0000_0000,
    0xFFFF_FFFF,
];

/// Ports rule ranges are drawn from.
const PORTS: [u16; 8] = [0, 1, 53, 80, 443, 1024, 65534, 65535];

fn prefix_v4() -> impl Strategy<Value = Prefix> {
    prop_oneof![
        1 => Just(Prefix::Any),
        1 => Just(Prefix::v4(Ipv4Addr::from(0), 0)),
        2 => (prop::sample::select(&BASES[..]), any::<u32>(), 0u8..=32).prop_map(
            |(base, noise, len)| {
                // Perturb the host part a little so sibling prefixes appear.
                Prefix::v4(Ipv4Addr::from(base ^ (noise & 0x0000_0F0F)), len)
            }
        ),
        2 => (prop::sample::select(&BASES[..]), prop::sample::select(&[8u8, 16, 24, 31, 32][..]))
            .prop_map(|(base, len)| Prefix::v4(Ipv4Addr::from(base), len)),
    ]
}

fn prefix_v6() -> impl Strategy<Value = Prefix> {
    (0u8..=128, any::<bool>()).prop_map(|(len, low)| {
        let addr = if low { 0x2001_0db8u128 << 96 } else { 1 };
        Prefix::v6(Ipv6Addr::from(addr), len)
    })
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
        3 => prop::sample::select(&[0u8, 1, 6, 17, 132, 255][..]).prop_map(Proto::Number),
        2 => (any::<u8>(), any::<u8>()).prop_map(|(value, mask)| Proto::Masked { value, mask }),
    ]
}

/// A rule: mostly IPv4, sometimes IPv6 or any/any when `v6` is set.
fn rule(v6: bool) -> impl Strategy<Value = Rule> {
    let prefixes = if v6 {
        prop_oneof![
            4 => (prefix_v4(), prefix_v4()),
            1 => (prefix_v6(), prefix_v6()),
            1 => (prefix_v6(), Just(Prefix::Any)),
        ]
        .boxed()
    } else {
        (prefix_v4(), prefix_v4()).boxed()
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

/// Values at a range's boundaries: each endpoint and its neighbours.
fn around(lo: u64, hi: u64, max: u64) -> Vec<u64> {
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

fn v4_bounds(prefix: &Prefix) -> Vec<u64> {
    match *prefix {
        Prefix::V4 { addr, len } => {
            let mask = u32::MAX.checked_shl(32 - u32::from(len)).unwrap_or(0);
            let lo = u32::from(addr) & mask;
            around(u64::from(lo), u64::from(lo | !mask), u64::from(u32::MAX))
        }
        _ => vec![0, u64::from(u32::MAX)],
    }
}

/// Keys built from rule boundaries, chosen by `picks`.
fn boundary_keys(rules: &[Rule], picks: &[(usize, [u16; 6])], v6: bool) -> Vec<FlowKey> {
    if rules.is_empty() {
        return Vec::new();
    }
    picks
        .iter()
        .map(|&(index, choice)| {
            // Each field from a possibly different rule, to cross boundaries.
            let pick = |offset: u16| &rules[(index + usize::from(offset)) % rules.len()];
            let select = |values: Vec<u64>, c: u16| values[usize::from(c) % values.len()];
            let src = select(v4_bounds(&pick(choice[0]).src), choice[0] >> 4);
            let dst = select(v4_bounds(&pick(choice[1]).dst), choice[1] >> 4);
            let sp = pick(choice[2]).src_port;
            let dp = pick(choice[3]).dst_port;
            let src_port = select(
                around(u64::from(sp.lo), u64::from(sp.hi), 65535),
                choice[2] >> 4,
            );
            let dst_port = select(
                around(u64::from(dp.lo), u64::from(dp.hi), 65535),
                choice[3] >> 4,
            );
            let proto = match pick(choice[4]).proto {
                Proto::Any => (choice[4] >> 4) as u8,
                Proto::Number(n) => n.wrapping_add(((choice[4] >> 4) % 3) as u8).wrapping_sub(1),
                Proto::Masked { value, mask } => (value & mask) | ((choice[4] >> 4) as u8 & !mask),
            };
            let key = FlowKey::v4(
                0,
                proto,
                Ipv4Addr::from(src as u32),
                Ipv4Addr::from(dst as u32),
                src_port as u16,
                dst_port as u16,
            );
            if v6 && choice[5] % 4 != 3 {
                // An IPv6 key: both addresses IPv6 (a flow is of one family).
                let v6_addr = |c: u16| {
                    let base = if c & 1 == 0 { 0x2001_0db8u128 << 96 } else { 1 };
                    Ipv6Addr::from(base ^ u128::from(c >> 1))
                };
                return FlowKey::v6(
                    0,
                    proto,
                    v6_addr(choice[5] >> 2),
                    v6_addr(choice[5] >> 3),
                    key.src_port,
                    key.dst_port,
                );
            }
            key
        })
        .collect()
}

/// Classifies `keys` with both classifiers, in odd-sized batches.
fn check(rules: Vec<Rule>, keys: &[FlowKey]) -> Result<(), TestCaseError> {
    let abv = BitVectorClassifier::new(&rules).map_err(|e| TestCaseError::fail(e.to_string()))?;
    let linear = LinearClassifier::new(rules);
    let mut got = vec![0u32; keys.len()];
    let mut want = vec![0u32; keys.len()];
    for (keys, out) in keys.chunks(37).zip(got.chunks_mut(37)) {
        abv.classify_batch(keys, out);
    }
    linear.classify_batch(keys, &mut want);
    for (index, key) in keys.iter().enumerate() {
        prop_assert_eq!(got[index], want[index], "key {:?}", key);
        prop_assert_eq!(
            abv.classify(key),
            linear.classify(key),
            "single key {:?}",
            key
        );
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(96))]

    #[test]
    fn ipv4_matches_linear_oracle(
        rules in prop::collection::vec(rule(false), 1..300),
        picks in prop::collection::vec((any::<usize>(), any::<[u16; 6]>()), 200),
        random in prop::collection::vec(
            (any::<u32>(), any::<u32>(), any::<u8>(), any::<u16>(), any::<u16>()), 20),
    ) {
        let mut keys = boundary_keys(&rules, &picks, false);
        keys.extend(random.into_iter().map(|(s, d, proto, src_port, dst_port)| FlowKey::v4(
            0, proto, Ipv4Addr::from(s), Ipv4Addr::from(d), src_port, dst_port,
        )));
        check(rules, &keys)?;
    }

    #[test]
    fn mixed_families_match_linear_oracle(
        rules in prop::collection::vec(rule(true), 1..300),
        picks in prop::collection::vec((any::<usize>(), any::<[u16; 6]>()), 200),
    ) {
        let keys = boundary_keys(&rules, &picks, true);
        check(rules, &keys)?;
    }
}

#[test]
fn wide_and_exact_rules_at_the_edges() {
    let mut rules = Vec::new();
    let mut host = Rule::any(Action::Deny);
    host.src = Prefix::v4(Ipv4Addr::new(255, 255, 255, 255), 32);
    host.dst_port = PortRange::single(65535);
    rules.push(host);
    let mut zero = Rule::any(Action::Deny);
    zero.dst = Prefix::v4(Ipv4Addr::new(0, 0, 0, 0), 32);
    zero.proto = Proto::Masked {
        value: 0x80,
        mask: 0x80,
    };
    rules.push(zero);
    rules.push(Rule::any(Action::Permit));
    let abv = BitVectorClassifier::new(&rules).unwrap();
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
    assert_eq!(abv.classify(&key([255; 4], [1; 4], 6, 65535)), Some(0));
    assert_eq!(abv.classify(&key([255; 4], [1; 4], 6, 65534)), Some(2));
    assert_eq!(abv.classify(&key([1; 4], [0; 4], 0x81, 0)), Some(1));
    assert_eq!(abv.classify(&key([1; 4], [0; 4], 0x7f, 0)), Some(2));
    let v6 = FlowKey::v6(0, 6, Ipv6Addr::LOCALHOST, Ipv6Addr::LOCALHOST, 0, 65535);
    assert_eq!(abv.classify(&v6), Some(2));
}

/// The shared ClassBench directory; fails loudly when it is missing.
fn data_dir() -> PathBuf {
    let dir = PathBuf::from(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../shared/data/classbench/"
    ));
    assert!(
        dir.is_dir(),
        "ClassBench data missing: expected {}",
        dir.display()
    );
    dir
}

/// Checks the bit-vector classifier on the whole of `set`'s trace against
/// `set_expected`.
fn check_set(set: &str) {
    let dir = data_dir();
    let rules = classbench::load_rules(&dir.join(set)).unwrap();
    let trace = classbench::load_trace(&dir.join(format!("{set}_trace"))).unwrap();
    let expected: Vec<u32> = std::fs::read_to_string(dir.join(format!("{set}_expected")))
        .unwrap()
        .lines()
        .map(|line| line.trim().parse().unwrap())
        .collect();
    assert_eq!(trace.len(), expected.len(), "{set}: trace and expected");

    let classifier = BitVectorClassifier::new(&rules).unwrap();
    let mut out = vec![0u32; trace.len()];
    for (keys, out) in trace.chunks(32).zip(out.chunks_mut(32)) {
        classifier.classify_batch(keys, out);
    }
    let mut matched = 0;
    for (index, (got, want)) in out.iter().zip(&expected).enumerate() {
        assert_eq!(
            got,
            want,
            "{set}: trace line {} ({:?})",
            index + 1,
            trace[index]
        );
        matched += usize::from(*got != NO_MATCH);
    }
    assert!(matched > 0, "{set}: nothing matched");
}

#[test]
fn acl1_1k_matches_rte_acl() {
    check_set("acl1_1k");
}

/// The whole 98,020-line trace.
#[test]
fn acl1_10k_matches_rte_acl() {
    check_set("acl1_10k");
}
