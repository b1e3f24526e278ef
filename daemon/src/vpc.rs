//! The node's VPC state — primary IP(s), VPC CIDRs, SNAT exclusions, SNAT ports — as
//! `vpc.sync` or the `[vpc]` section of the configuration give it, validated into the
//! dataplane's [`SnatPolicy`], and shown back.

use ferrule_api::{VpcState, VpcSync};
use ferrule_dataplane::nat::{SnatPolicy, DEFAULT_PORTS, NODE_PORTS};
use ferrule_dataplane::wire::Ipv4Cidr;
use std::net::Ipv4Addr;

/// Why a VPC state was refused: the field (`node_ips[0]`, `snat_ports`, …) and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VpcError {
    pub field: String,
    pub message: String,
}

fn err(field: String, message: impl Into<String>) -> VpcError {
    VpcError {
        field,
        message: message.into(),
    }
}

/// Parses an IPv4 CIDR with its host bits clear.
fn cidr(text: &str, field: String) -> Result<Ipv4Cidr, VpcError> {
    let (a, l) = text.split_once('/').ok_or_else(|| {
        err(
            field.clone(),
            format!("{text:?} is not an IPv4 CIDR (ADDR/LEN)"),
        )
    })?;
    let addr: Ipv4Addr = a.parse().map_err(|_| {
        err(
            field.clone(),
            format!("{text:?}: {a:?} is not an IPv4 address (SNAT is IPv4 only)"),
        )
    })?;
    let len: u8 = l
        .parse()
        .ok()
        .filter(|l| *l <= 32)
        .ok_or_else(|| err(field.clone(), format!("{text:?}: prefix length 0-32")))?;
    let mask = u32::MAX.checked_shl(32 - u32::from(len)).unwrap_or(0);
    if u32::from(addr) & !mask != 0 {
        return Err(err(
            field,
            format!(
                "{text} has host bits set (the prefix is {}/{len})",
                Ipv4Addr::from(u32::from(addr) & mask)
            ),
        ));
    }
    Ipv4Cidr::new(addr, len).map_err(|_| err(field, format!("{text:?}: prefix length 0-32")))
}

/// `LO-HI` minus the NodePort range.
fn ports(text: &str) -> Result<Vec<(u16, u16)>, VpcError> {
    let field = || "snat_ports".to_string();
    let bad = || {
        err(
            field(),
            format!("{text:?} is not LO-HI with 1 <= LO <= HI <= 65535"),
        )
    };
    let (lo, hi) = text.split_once('-').ok_or_else(bad)?;
    let lo: u16 = lo.trim().parse().map_err(|_| bad())?;
    let hi: u16 = hi.trim().parse().map_err(|_| bad())?;
    if lo == 0 || lo > hi {
        return Err(bad());
    }
    let (np_lo, np_hi) = NODE_PORTS;
    let mut out = Vec::new();
    if lo < np_lo {
        out.push((lo, hi.min(np_lo - 1)));
    }
    if hi > np_hi {
        out.push((lo.max(np_hi + 1), hi));
    }
    if out.is_empty() {
        return Err(err(
            field(),
            format!("{text} lies in the NodePort range {np_lo}-{np_hi}, which SNAT never uses"),
        ));
    }
    Ok(out)
}

/// Validates a VPC state against the IPv4 addresses Ferrule owns on uplink ports.
pub fn policy(spec: &VpcSync, uplink_addrs: &[Ipv4Addr]) -> Result<SnatPolicy, VpcError> {
    let mut node_ips = Vec::with_capacity(spec.node_ips.len());
    for (i, text) in spec.node_ips.iter().enumerate() {
        let field = format!("node_ips[{i}]");
        let ip: Ipv4Addr = text
            .parse()
            .map_err(|_| err(field.clone(), format!("{text:?} is not an IPv4 address")))?;
        if !uplink_addrs.contains(&ip) {
            let owned: Vec<String> = uplink_addrs.iter().map(Ipv4Addr::to_string).collect();
            return Err(err(
                field,
                format!(
                    "{ip} is not an address of an uplink port (the uplinks' `addresses`: {})",
                    if owned.is_empty() {
                        "none".into()
                    } else {
                        owned.join(", ")
                    }
                ),
            ));
        }
        if node_ips.contains(&ip) {
            return Err(err(field, format!("{ip} is given twice")));
        }
        node_ips.push(ip);
    }
    let list = |texts: &[String], name: &str| -> Result<Vec<Ipv4Cidr>, VpcError> {
        texts
            .iter()
            .enumerate()
            .map(|(i, t)| cidr(t, format!("{name}[{i}]")))
            .collect()
    };
    Ok(SnatPolicy {
        node_ips,
        vpc_cidrs: list(&spec.vpc_cidrs, "vpc_cidrs")?,
        exclude: list(&spec.snat_exclude, "snat_exclude")?,
        ports: match &spec.snat_ports {
            Some(text) => ports(text)?,
            None => DEFAULT_PORTS.to_vec(),
        },
    })
}

/// Fewest ports a worker's share of the SNAT range should hold: below it a warning
/// says how few (one per worker's concurrent connections to one remote endpoint).
pub const SHARE_WARN: usize = 64;

/// Each worker masquerades only to the ports `p` of the range with
/// `p % workers == worker` (the port names the connection's owner): how many ports each
/// of `workers` workers gets from `ports`.
pub fn port_shares(ports: &[(u16, u16)], workers: u16) -> Vec<usize> {
    let n = usize::from(workers.max(1));
    let mut shares = vec![0usize; n];
    for &(lo, hi) in ports {
        for p in lo..=hi {
            shares[usize::from(p) % n] += 1;
        }
    }
    shares
}

/// Refuses a SNAT range that leaves a worker without a port (its pods' traffic to
/// outside the VPC would all be dropped as `snat-ports-exhausted` while other workers
/// have ports free); the smallest share, for a warning when it is below
/// [`SHARE_WARN`].
pub fn check_port_shares(ports: &[(u16, u16)], workers: u16) -> Result<usize, VpcError> {
    let shares = port_shares(ports, workers);
    let total: usize = shares.iter().sum();
    match shares.iter().position(|&s| s == 0) {
        Some(w) => Err(err(
            "snat_ports".into(),
            format!(
                "{total} port(s) for {workers} workers leave worker {w} none (worker w \
                 masquerades only to the ports p with p % {workers} == w): give at least \
                 {workers} ports, and {} or more for {SHARE_WARN} per worker",
                usize::from(workers) * SHARE_WARN
            ),
        )),
        None => Ok(shares.iter().copied().min().unwrap_or(0)),
    }
}

/// The state in force, for `vpc.show`.
pub fn state(p: &SnatPolicy) -> VpcState {
    VpcState {
        node_ips: p.node_ips.iter().map(Ipv4Addr::to_string).collect(),
        vpc_cidrs: p.vpc_cidrs.iter().map(Ipv4Cidr::to_string).collect(),
        snat_exclude: p.exclude.iter().map(Ipv4Cidr::to_string).collect(),
        snat_ports: p
            .ports
            .iter()
            .map(|(lo, hi)| format!("{lo}-{hi}"))
            .collect(),
        snat_address: p.snat_addr().map(|a| a.to_string()),
        enis: Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_worker_needs_a_share_of_the_snat_ports() {
        assert_eq!(port_shares(&[(61000, 61003)], 2), [2, 2]);
        assert_eq!(port_shares(&[(61000, 61002)], 2), [2, 1]);
        assert_eq!(
            port_shares(&[(61000, 61000), (61003, 61003)], 4),
            [1, 0, 0, 1]
        );
        assert_eq!(check_port_shares(&[(61000, 61003)], 4), Ok(1));
        assert_eq!(check_port_shares(&DEFAULT_PORTS, 8), Ok(61_744 / 8));
        let e = check_port_shares(&[(61000, 61001)], 4).expect_err("two workers without ports");
        assert_eq!(e.field, "snat_ports");
        assert!(
            e.message.contains("worker 2") && e.message.contains("at least 4"),
            "{}",
            e.message
        );
        assert_eq!(check_port_shares(&[(61000, 61001)], 1), Ok(2));
    }

    fn spec(node: &[&str], vpc: &[&str], ports: Option<&str>) -> VpcSync {
        VpcSync {
            node_ips: node.iter().map(|s| s.to_string()).collect(),
            vpc_cidrs: vpc.iter().map(|s| s.to_string()).collect(),
            snat_exclude: vec![],
            snat_ports: ports.map(Into::into),
            enis: vec![],
        }
    }

    const UPLINK: [Ipv4Addr; 1] = [Ipv4Addr::new(192, 0, 2, 10)];

    #[test]
    fn valid_state_round_trips() {
        let p = policy(
            &spec(&["192.0.2.10"], &["10.0.0.0/16"], Some("1024-40000")),
            &UPLINK,
        )
        .unwrap();
        assert_eq!(p.snat_addr(), Some(UPLINK[0]));
        assert_eq!(p.ports, vec![(1024, 29999), (32768, 40000)]);
        let s = state(&p);
        assert_eq!(s.vpc_cidrs, vec!["10.0.0.0/16"]);
        assert_eq!(s.snat_ports, vec!["1024-29999", "32768-40000"]);
        assert_eq!(
            policy(&spec(&[], &[], None), &UPLINK).unwrap().ports,
            DEFAULT_PORTS.to_vec()
        );
        assert_eq!(
            policy(&spec(&[], &[], Some("61000-61001")), &UPLINK)
                .unwrap()
                .ports,
            vec![(61000, 61001)]
        );
    }

    #[test]
    fn refusals_name_the_field() {
        let cases = [
            (
                spec(&["192.0.2.11"], &[], None),
                "node_ips[0]",
                "not an address of an uplink port",
            ),
            (
                spec(&["2001:db8::10"], &[], None),
                "node_ips[0]",
                "not an IPv4 address",
            ),
            (
                spec(&["192.0.2.10", "192.0.2.10"], &[], None),
                "node_ips[1]",
                "twice",
            ),
            (
                spec(&[], &["10.0.0.1/16"], None),
                "vpc_cidrs[0]",
                "host bits set",
            ),
            (
                spec(&[], &["10.0.0.0"], None),
                "vpc_cidrs[0]",
                "not an IPv4 CIDR",
            ),
            (spec(&[], &["fd00::/8"], None), "vpc_cidrs[0]", "IPv4 only"),
            (
                spec(&[], &["10.0.0.0/33"], None),
                "vpc_cidrs[0]",
                "prefix length",
            ),
            (spec(&[], &[], Some("2000-1000")), "snat_ports", "LO-HI"),
            (spec(&[], &[], Some("0-10")), "snat_ports", "LO-HI"),
            (spec(&[], &[], Some("70000")), "snat_ports", "LO-HI"),
            (
                spec(&[], &[], Some("30000-32767")),
                "snat_ports",
                "NodePort",
            ),
        ];
        for (s, field, text) in cases {
            let e = policy(&s, &UPLINK).unwrap_err();
            assert_eq!(e.field, field, "{e:?}");
            assert!(e.message.contains(text), "{e:?}");
        }
    }
}
