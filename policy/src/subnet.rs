//! Subnet arithmetic for ipBlock: parsing a CIDR as Kubernetes writes it, and
//! subtracting `except` subnets from a block into the fewest prefixes that cover the
//! rest (the seed's `subtractSubnet`), so a block becomes permit-only rules.

use ferrule_dataplane::acl::{Prefix, RuleField};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// A prefix as (network bits left-aligned in a u128, length, is IPv4).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Net {
    bits: u128,
    len: u8,
    v4: bool,
}

impl Net {
    fn of(p: Prefix) -> Option<Net> {
        match p {
            Prefix::Any => None,
            Prefix::V4 { addr, len } => Some(Net {
                bits: u128::from(u32::from(addr)) << 96,
                len,
                v4: true,
            }),
            Prefix::V6 { addr, len } => Some(Net {
                bits: u128::from(addr),
                len,
                v4: false,
            }),
        }
    }

    fn prefix(self) -> Prefix {
        if self.v4 {
            // The top 32 bits hold the address.
            Prefix::v4(Ipv4Addr::from((self.bits >> 96) as u32), self.len)
        } else {
            Prefix::v6(Ipv6Addr::from(self.bits), self.len)
        }
    }

    fn mask(len: u8) -> u128 {
        u128::MAX.checked_shl(128 - u32::from(len)).unwrap_or(0)
    }

    /// Whether `self` contains `other` (same family, shorter or equal length).
    fn contains(self, other: Net) -> bool {
        self.v4 == other.v4
            && self.len <= other.len
            && (self.bits ^ other.bits) & Net::mask(self.len) == 0
    }

    fn max_len(self) -> u8 {
        if self.v4 {
            32
        } else {
            128
        }
    }
}

/// Parses an ipBlock CIDR (`10.0.0.0/8`, `fd00::/64`) or a bare address (a host
/// prefix). Host bits are cleared.
pub fn parse_cidr(text: &str) -> Result<Prefix, String> {
    match Prefix::parse(text.trim(), RuleField::Src) {
        Ok(Prefix::Any) | Err(_) => Err(format!("{text:?} is not a CIDR")),
        Ok(p) => Ok(p),
    }
}

/// The host prefix of an address (`/32` or `/128`).
pub fn host(ip: IpAddr) -> Prefix {
    match ip {
        IpAddr::V4(a) => Prefix::v4(a, 32),
        IpAddr::V6(a) => Prefix::v6(a, 128),
    }
}

/// Whether `outer` contains `inner` (both concrete prefixes of one family).
pub fn contains(outer: Prefix, inner: Prefix) -> bool {
    match (Net::of(outer), Net::of(inner)) {
        (Some(o), Some(i)) => o.contains(i),
        (None, _) => true,
        (Some(_), None) => false,
    }
}

/// `block` minus every prefix of `except`, as disjoint prefixes in address order.
/// Excepted prefixes of the other family, or outside the block, change nothing.
pub fn subtract(block: Prefix, except: &[Prefix]) -> Vec<Prefix> {
    let Some(block) = Net::of(block) else {
        return vec![block];
    };
    let holes: Vec<Net> = except.iter().filter_map(|p| Net::of(*p)).collect();
    let mut out = Vec::new();
    split(block, &holes, &mut out);
    out.into_iter().map(Net::prefix).collect()
}

fn split(net: Net, holes: &[Net], out: &mut Vec<Net>) {
    if holes.iter().any(|h| h.contains(net)) {
        return;
    }
    if !holes.iter().any(|h| net.contains(*h)) {
        out.push(net);
        return;
    }
    // A hole lies strictly inside: cover each half separately.
    if net.len >= net.max_len() {
        return;
    }
    let len = net.len + 1;
    let bit = 1u128 << (128 - u32::from(len));
    split(Net { len, ..net }, holes, out);
    split(
        Net {
            bits: net.bits | bit,
            len,
            ..net
        },
        holes,
        out,
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(text: &str) -> Prefix {
        parse_cidr(text).unwrap()
    }

    fn texts(v: Vec<Prefix>) -> Vec<String> {
        v.into_iter().map(|p| p.to_string()).collect()
    }

    #[test]
    fn the_seeds_example() {
        assert_eq!(
            texts(subtract(p("1.1.1.0/24"), &[p("1.1.1.0/26")])),
            ["1.1.1.64/26", "1.1.1.128/25"]
        );
    }

    #[test]
    fn several_holes_nested_and_disjoint() {
        assert_eq!(
            texts(subtract(
                p("10.0.0.0/8"),
                &[p("10.0.0.0/9"), p("10.128.0.0/10"), p("10.128.0.0/16")]
            )),
            ["10.192.0.0/10"]
        );
        assert_eq!(
            texts(subtract(p("172.17.0.0/16"), &[p("172.17.1.0/24")])),
            [
                "172.17.0.0/24",
                "172.17.2.0/23",
                "172.17.4.0/22",
                "172.17.8.0/21",
                "172.17.16.0/20",
                "172.17.32.0/19",
                "172.17.64.0/18",
                "172.17.128.0/17"
            ]
        );
        assert!(subtract(p("10.0.0.0/24"), &[p("10.0.0.0/16")]).is_empty());
        assert_eq!(
            texts(subtract(
                p("10.0.0.0/24"),
                &[p("192.168.0.0/16"), p("fd00::/8")]
            )),
            ["10.0.0.0/24"]
        );
        assert_eq!(
            texts(subtract(p("10.0.0.0/31"), &[p("10.0.0.1/32")])),
            ["10.0.0.0/32"]
        );
    }

    #[test]
    fn ipv6_and_containment() {
        assert_eq!(
            texts(subtract(p("fd00::/126"), &[p("fd00::1")])),
            ["fd00::/128", "fd00::2/127"]
        );
        assert!(contains(p("10.0.0.0/8"), p("10.1.2.3")));
        assert!(!contains(p("10.0.0.0/8"), p("11.1.2.3")));
        assert!(!contains(p("10.0.0.0/8"), p("fd00::1")));
        assert!(parse_cidr("10.0.0.0/33").is_err());
        assert!(parse_cidr("any").is_err());
    }

    #[test]
    fn the_pieces_cover_exactly_the_block_minus_the_holes() {
        // Brute force over a /24 with random-ish holes.
        let block = p("192.168.7.0/24");
        for seed in 0u32..50 {
            let holes: Vec<Prefix> = (0..3)
                .map(|i| {
                    let x = seed.wrapping_mul(2654435761).rotate_left(i * 7);
                    let len = 25 + (x % 8) as u8;
                    Prefix::v4(Ipv4Addr::new(192, 168, 7, (x >> 8) as u8), len)
                })
                .collect();
            let pieces = subtract(block, &holes);
            for last in 0..=255u8 {
                let ip = IpAddr::V4(Ipv4Addr::new(192, 168, 7, last));
                let in_hole = holes.iter().any(|h| h.matches(ip));
                let covered = pieces.iter().filter(|q| q.matches(ip)).count();
                assert_eq!(covered, usize::from(!in_hole), "{ip} holes {holes:?}");
            }
        }
    }
}
