//! The compiled classifier (`acl::Compiled`: RFC tables for IPv4 where they fit, else
//! decision trees) and the decision trees alone against the linear oracle (the
//! bit-vector classifier's checks moved with it to `ferrule-perf`'s tests): random
//! IPv4, IPv6 and mixed rule sets with keys at rule boundaries, edge cases (empty set,
//! identical rules, /0, host prefixes, ports 0 and 65535, masked protocols, inverted
//! port ranges), batch results against single-key results, and a synthetic
//! wildcard-heavy set of several thousand rules for bounded build memory.

#[path = "common/acl_gen.rs"]
mod acl_gen;

use acl_gen::{boundary_keys, key4, random_keys, random_raw, rule, Families};
use ferrule_dataplane::acl::{
    Action, Classifier, Compiled, DecisionTreeClassifier, FlowKey, LinearClassifier, PortRange,
    Prefix, Proto, Rule, NO_MATCH,
};
use ferrule_dataplane::wire::IpCidr;
use proptest::prelude::*;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::net::{Ipv4Addr, Ipv6Addr};

/// Classifies `keys` with the compiled classifier, the tree and the oracle: batches of
/// several odd sizes and single keys must all agree.
fn check(rules: Vec<Rule>, keys: &[FlowKey]) -> Result<(), TestCaseError> {
    let compiled = Compiled::new(&rules).map_err(|e| TestCaseError::fail(e.to_string()))?;
    let tree =
        DecisionTreeClassifier::new(&rules).map_err(|e| TestCaseError::fail(e.to_string()))?;
    let linear = LinearClassifier::new(rules);
    let mut want = vec![0u32; keys.len()];
    linear.classify_batch(keys, &mut want);
    let under: [(&str, &dyn Classifier); 2] =
        [(compiled.ipv4_lookup(), &compiled), ("tree", &tree)];
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

acl_gen::linear_oracle_properties!();

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
        dst_selector: None,
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
    assert_eq!(tree.classify(&key4([255; 4], [1; 4], 6, 65535)), Some(0));
    assert_eq!(tree.classify(&key4([255; 4], [1; 4], 6, 65534)), Some(3));
    assert_eq!(tree.classify(&key4([1; 4], [0; 4], 0x81, 0)), Some(1));
    assert_eq!(tree.classify(&key4([1; 4], [0; 4], 0x7f, 0)), Some(3));
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
                Prefix::Cidr(IpCidr::V4(net)) if i % 4 != 0 => {
                    let len = u32::from(net.prefix_len());
                    let host = rng.gen::<u32>().checked_shr(len).unwrap_or(0);
                    Ipv4Addr::from(u32::from(net.address()) | host)
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
    let (rules, cases) = acl_gen::edge_rules();
    let tree = Compiled::new(&rules).unwrap();
    for (key, want) in cases {
        assert_eq!(tree.classify(&key), want, "tree {key:?}");
    }
}

/// A rule whose port range is inverted (`lo > hi`, which only unvalidated rules such as
/// ClassBench lines can carry) holds no port: RFC, the trees and the oracle all skip it.
#[test]
fn inverted_port_ranges_match_nothing() {
    let mut rules: Vec<Rule> = (0..12u8)
        .map(|i| {
            permit(
                Prefix::v4(Ipv4Addr::new(10, i, 0, 0), 16),
                Prefix::Any,
                Proto::Number(6),
                PortRange::ANY,
                PortRange::single(80 + u16::from(i)),
            )
        })
        .collect();
    rules.insert(
        0,
        permit(
            Prefix::Any,
            Prefix::Any,
            Proto::Any,
            PortRange { lo: 1000, hi: 10 },
            PortRange::ANY,
        ),
    );
    rules.push(Rule::any(Action::Permit));
    let compiled = Compiled::new(&rules).unwrap();
    assert_eq!(compiled.ipv4_lookup(), "rfc");
    let keys: Vec<FlowKey> = [0u16, 10, 11, 500, 999, 1000, 65535]
        .iter()
        .flat_map(|&sport| {
            (0..3u8).map(move |i| {
                FlowKey::v4(
                    0,
                    6,
                    Ipv4Addr::new(10, i, 1, 1),
                    Ipv4Addr::new(192, 0, 2, 1),
                    sport,
                    80 + u16::from(i),
                )
            })
        })
        .collect();
    for key in &keys {
        assert_ne!(compiled.classify(key), Some(0), "{key:?}");
    }
    check(rules, &keys).unwrap();
}
