//! Subnet arithmetic for ipBlock: parsing a CIDR as Kubernetes writes it, and
//! subtracting `except` subnets from a block into the fewest prefixes that cover the
//! rest (the seed's `subtractSubnet`), so a block becomes permit-only rules.

use ferrule_dataplane::acl::{Prefix, RuleField};
use ferrule_dataplane::wire::IpCidr;
use std::net::IpAddr;

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
    Prefix::from(IpCidr::host(ip))
}

/// Whether `outer` contains `inner` (both concrete prefixes of one family).
pub fn contains(outer: Prefix, inner: Prefix) -> bool {
    match (outer, inner) {
        (Prefix::Any, _) => true,
        (Prefix::Cidr(o), Prefix::Cidr(i)) => o.contains_cidr(&i),
        (Prefix::Cidr(_), Prefix::Any) => false,
    }
}

/// `block` minus every prefix of `except`, as disjoint prefixes in address order.
/// Excepted prefixes of the other family, or outside the block, change nothing.
pub fn subtract(block: Prefix, except: &[Prefix]) -> Vec<Prefix> {
    let Prefix::Cidr(block) = block else {
        return vec![block];
    };
    let holes: Vec<IpCidr> = except.iter().filter_map(Prefix::cidr).collect();
    let mut out = Vec::new();
    split(block, &holes, &mut out);
    out.into_iter().map(Prefix::from).collect()
}

fn split(net: IpCidr, holes: &[IpCidr], out: &mut Vec<IpCidr>) {
    if holes.iter().any(|h| h.contains_cidr(&net)) {
        return;
    }
    if !holes.iter().any(|h| net.contains_cidr(h)) {
        out.push(net);
        return;
    }
    // A hole lies strictly inside: cover each half separately (a host prefix has no
    // halves, but a hole strictly inside it cannot be).
    if let Some((low, high)) = net.halves() {
        split(low, holes, out);
        split(high, holes, out);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;

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
