//! Random ACL rule sets and keys for checking classifiers against the linear oracle:
//! rules drawn around shared bases so prefixes overlap (IPv4, IPv6 or mixed), keys at
//! every rule's boundaries and off them. Shared by `acl_tree.rs` and the bit-vector
//! classifier's tests in `ferrule-perf`.

#![allow(dead_code)]

use ferrule_dataplane::acl::{Action, FlowKey, PortRange, Prefix, Proto, Rule};
use proptest::prelude::*;
use std::net::{Ipv4Addr, Ipv6Addr};

/// IPv4 base addresses rules and keys are drawn around, so prefixes overlap.
pub const BASES_V4: [u32; 6] = [
    0x0A00_0000,
    0x0A01_0203,
    0x0AFF_FFFF,
    0xC0A8_0101,
    0x0000_0000,
    0xFFFF_FFFF,
];

/// IPv6 base addresses: word boundaries, the ends of the space, an IPv4-mapped one.
pub const BASES_V6: [u128; 6] = [
    0x2001_0db8_0000_0000_0000_0000_0000_0000,
    0x2001_0db8_0000_0001_ffff_ffff_0000_0001,
    0x2001_0db8_ffff_ffff_ffff_ffff_ffff_ffff,
    0x0000_0000_0000_0000_0000_ffff_0a00_0001,
    0,
    u128::MAX,
];

/// Prefix lengths around the IPv6 word boundaries.
pub const LENS_V6: [u8; 12] = [0, 1, 31, 32, 33, 63, 64, 65, 96, 127, 128, 48];

/// Ports rule ranges are drawn from.
pub const PORTS: [u16; 8] = [0, 1, 53, 80, 443, 1024, 65534, 65535];

pub fn prefix_v4() -> impl Strategy<Value = Prefix> {
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

pub fn prefix_v6() -> impl Strategy<Value = Prefix> {
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

pub fn port_range() -> impl Strategy<Value = PortRange> {
    prop_oneof![
        2 => Just(PortRange::ANY),
        2 => prop::sample::select(&PORTS[..]).prop_map(PortRange::single),
        3 => (prop::sample::select(&PORTS[..]), prop::sample::select(&PORTS[..]))
            .prop_map(|(a, b)| PortRange { lo: a.min(b), hi: a.max(b) }),
        1 => (any::<u16>(), any::<u16>())
            .prop_map(|(a, b)| PortRange { lo: a.min(b), hi: a.max(b) }),
    ]
}

pub fn proto() -> impl Strategy<Value = Proto> {
    prop_oneof![
        2 => Just(Proto::Any),
        3 => prop::sample::select(&[0u8, 1, 6, 17, 58, 132, 255][..]).prop_map(Proto::Number),
        2 => (any::<u8>(), any::<u8>()).prop_map(|(value, mask)| Proto::Masked { value, mask }),
    ]
}

/// Which address families a rule set holds.
#[derive(Debug, Clone, Copy)]
pub enum Families {
    V4,
    V6,
    Mixed,
}

pub fn rule(families: Families) -> impl Strategy<Value = Rule> {
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
            dst_selector: None,
        },
    )
}

/// A range's ends and their neighbours, within `0..=max`.
pub fn around(lo: u128, hi: u128, max: u128) -> Vec<u128> {
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
pub fn address_bounds(prefix: &Prefix, v6: bool) -> Vec<u128> {
    match (prefix.v4_range(), prefix.v6_range(), v6) {
        (Some((lo, hi)), _, false) => around(lo.into(), hi.into(), u32::MAX.into()),
        (_, Some((lo, hi)), true) => around(lo, hi, u128::MAX),
        (_, _, false) => vec![0, u32::MAX.into(), 0x0A00_0001],
        (_, _, true) => vec![0, u128::MAX, BASES_V6[0] | 1],
    }
}

/// Keys built from rule boundaries, each field from a possibly different rule.
pub fn boundary_keys(
    rules: &[Rule],
    picks: &[(usize, [u16; 6])],
    families: Families,
) -> Vec<FlowKey> {
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

/// Random keys of the family mix, for keys off the rule boundaries.
pub fn random_keys(raw: &[(u128, u128, u8, u16, u16, bool)], families: Families) -> Vec<FlowKey> {
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

pub fn random_raw() -> impl Strategy<Value = Vec<(u128, u128, u8, u16, u16, bool)>> {
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

/// An IPv4 key from `src` port 0 to `dst` port `dst_port`.
pub fn key4(src: [u8; 4], dst: [u8; 4], proto: u8, dst_port: u16) -> FlowKey {
    FlowKey::v4(
        0,
        proto,
        Ipv4Addr::from(src),
        Ipv4Addr::from(dst),
        0,
        dst_port,
    )
}

/// Rules at the edges of the value spaces (a host prefix at the top of IPv4 with port
/// 65535, the zero address with a masked protocol, then permit all) and keys with the
/// rule each must match.
pub fn edge_rules() -> (Vec<Rule>, Vec<(FlowKey, Option<usize>)>) {
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
    let cases = [
        (key4([255; 4], [1; 4], 6, 65535), Some(0)),
        (key4([255; 4], [1; 4], 6, 65534), Some(2)),
        (key4([1; 4], [0; 4], 0x81, 0), Some(1)),
        (key4([1; 4], [0; 4], 0x7f, 0), Some(2)),
        (
            FlowKey::v6(0, 6, Ipv6Addr::LOCALHOST, Ipv6Addr::LOCALHOST, 0, 65535),
            Some(2),
        ),
    ];
    (rules, cases.to_vec())
}

/// The four properties every classifier is checked with against the linear oracle
/// (IPv4, IPv6, mixed rule sets with keys at rule boundaries and random keys, and many
/// identical rules), each through the `check(rules, keys)` of the file that invokes it.
#[allow(unused_macros)]
macro_rules! linear_oracle_properties {
    () => {
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
    };
}
#[allow(unused_imports)]
pub(crate) use linear_oracle_properties;
