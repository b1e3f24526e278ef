//! The node's VPC state — primary IP(s), VPC CIDRs, SNAT exclusions, SNAT ports, the
//! node's ENIs bound to uplink ports — as `vpc.sync` or the `[vpc]` section of the
//! configuration give it, validated all or nothing into the dataplane's [`SnatPolicy`]
//! and [`Eni`]s, and shown back.

use ferrule_api::{VpcEni, VpcEniState, VpcState, VpcSync};
use ferrule_dataplane::nat::{SnatPolicy, DEFAULT_PORTS, NODE_PORTS};
use ferrule_dataplane::snapshot::{PortRole, PortState};
use ferrule_dataplane::wire::{EthernetAddress, Ipv4Cidr};
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

/// An ENI of the node, validated and bound to its uplink port.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Eni {
    /// As `vpc.sync` gave it (shown back by `vpc.show`).
    pub spec: VpcEni,
    pub mac: EthernetAddress,
    pub device_index: u32,
    pub subnet: Ipv4Cidr,
    pub gateway: Ipv4Addr,
    pub primary_ip: Ipv4Addr,
    pub secondary_ips: Vec<Ipv4Addr>,
    /// The port index it is bound to.
    pub port: u16,
}

impl Eni {
    /// Its route table's name: `main` for the primary ENI (device index 0), else
    /// `eni-<device index>`.
    pub fn table(&self) -> String {
        if self.device_index == 0 {
            "main".into()
        } else {
            format!("eni-{}", self.device_index)
        }
    }
}

/// An IPv4 address inside `subnet`.
fn addr_in(text: &str, subnet: &Ipv4Cidr, field: String) -> Result<Ipv4Addr, VpcError> {
    let a: Ipv4Addr = text
        .parse()
        .map_err(|_| err(field.clone(), format!("{text:?} is not an IPv4 address")))?;
    if !subnet.contains(a) {
        return Err(err(
            field,
            format!("{a} is outside the ENI's subnet {subnet}"),
        ));
    }
    Ok(a)
}

/// Validates the ENIs of a `vpc.sync` against the ports (indexed as the FIB holds
/// them), binding each to its uplink port: an ID `eni-` and hex digits, a unicast MAC,
/// unique device indexes with the primary (0) among them, an IPv4 subnet holding the
/// gateway and every address, no address on two ENIs, the port an uplink of the
/// default network (named, or the one with the ENI's MAC), no port bound twice.
pub fn enis(spec: &VpcSync, ports: &[PortState]) -> Result<Vec<Eni>, VpcError> {
    let mut out: Vec<Eni> = Vec::with_capacity(spec.enis.len());
    // Every address seen so far and the ENI it is on.
    let mut owners: Vec<(Ipv4Addr, usize)> = Vec::new();
    for (i, e) in spec.enis.iter().enumerate() {
        let f = |name: &str| format!("enis[{i}].{name}");
        let hex = e.id.strip_prefix("eni-").unwrap_or("");
        if hex.is_empty() || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(err(
                f("id"),
                format!("{:?} is not an ENI ID (`eni-` and hex digits)", e.id),
            ));
        }
        if let Some(j) = out.iter().position(|o| o.spec.id == e.id) {
            return Err(err(f("id"), format!("{} is also enis[{j}]", e.id)));
        }
        let mac: EthernetAddress = e
            .mac
            .parse()
            .ok()
            .filter(|m: &EthernetAddress| m.0[0] & 1 == 0 && m.0 != [0; 6])
            .ok_or_else(|| {
                err(
                    f("mac"),
                    format!("{:?} is not a unicast MAC address", e.mac),
                )
            })?;
        if let Some(j) = out.iter().position(|o| o.device_index == e.device_index) {
            return Err(err(
                f("device_index"),
                format!("device index {} is also enis[{j}]'s", e.device_index),
            ));
        }
        let subnet = cidr(&e.subnet_cidr, f("subnet_cidr"))?;
        let gateway = addr_in(&e.gateway, &subnet, f("gateway"))?;
        let primary_ip = addr_in(&e.primary_ip, &subnet, f("primary_ip"))?;
        let mut addrs = vec![(primary_ip, f("primary_ip"))];
        let mut secondary_ips = Vec::with_capacity(e.secondary_ips.len());
        for (k, text) in e.secondary_ips.iter().enumerate() {
            let field = f(&format!("secondary_ips[{k}]"));
            let a = addr_in(text, &subnet, field.clone())?;
            secondary_ips.push(a);
            addrs.push((a, field));
        }
        for (a, field) in addrs {
            if a == gateway {
                return Err(err(field, format!("{a} is the subnet's gateway")));
            }
            if let Some(&(_, j)) = owners.iter().find(|(b, _)| *b == a) {
                let whose = if j == i {
                    "given twice on this ENI".to_string()
                } else {
                    format!("also on enis[{j}] ({})", spec.enis[j].id)
                };
                return Err(err(field, format!("{a} is {whose}")));
            }
            owners.push((a, i));
        }
        let uplink = |p: &PortState| p.role == PortRole::Uplink && !p.name.is_empty();
        let port = match &e.port {
            Some(name) => {
                let idx = ports
                    .iter()
                    .position(|p| p.name == *name && !name.is_empty())
                    .ok_or_else(|| err(f("port"), format!("no port named {name:?}")))?;
                if !uplink(&ports[idx]) {
                    return Err(err(
                        f("port"),
                        format!("port {name:?} is a {} port, not an uplink", ports[idx].role),
                    ));
                }
                idx
            }
            None => {
                let found: Vec<usize> = (0..ports.len())
                    .filter(|&k| uplink(&ports[k]) && ports[k].mac == mac)
                    .collect();
                match found[..] {
                    [k] => k,
                    [] => {
                        return Err(err(
                            f("port"),
                            format!("no uplink port has the ENI's MAC {mac}: name the port"),
                        ))
                    }
                    _ => {
                        let names: Vec<&str> =
                            found.iter().map(|&k| ports[k].name.as_str()).collect();
                        return Err(err(
                            f("port"),
                            format!(
                                "uplink ports {} all have the ENI's MAC {mac}: name the port",
                                names.join(", ")
                            ),
                        ));
                    }
                }
            }
        };
        if ports[port].network != 0 {
            return Err(err(
                f("port"),
                format!(
                    "port {:?} is not in the default network (ENIs are its uplinks)",
                    ports[port].name
                ),
            ));
        }
        if let Some(j) = out.iter().position(|o| usize::from(o.port) == port) {
            return Err(err(
                f("port"),
                format!(
                    "port {:?} is already bound to enis[{j}] ({})",
                    ports[port].name, spec.enis[j].id
                ),
            ));
        }
        out.push(Eni {
            spec: e.clone(),
            mac,
            device_index: e.device_index,
            subnet,
            gateway,
            primary_ip,
            secondary_ips,
            port: port as u16,
        });
    }
    if !out.is_empty() && !out.iter().any(|e| e.device_index == 0) {
        return Err(err(
            "enis".into(),
            "no primary ENI (device_index 0) among the ENIs given",
        ));
    }
    Ok(out)
}

/// A `vpc.sync` validated whole: the SNAT policy and the ENIs bound to their ports.
/// `uplink_addrs` are the IPv4 addresses Ferrule owns on uplink ports besides those the
/// ENIs bring (their primary IPs count too). Without `node_ips`, the node IP is the
/// primary ENI's primary IP.
pub fn sync(
    spec: &VpcSync,
    ports: &[PortState],
    uplink_addrs: &[Ipv4Addr],
) -> Result<(SnatPolicy, Vec<Eni>), VpcError> {
    let enis = enis(spec, ports)?;
    let mut addrs = uplink_addrs.to_vec();
    addrs.extend(enis.iter().map(|e| e.primary_ip));
    let policy = match enis.iter().find(|e| e.device_index == 0) {
        Some(primary) if spec.node_ips.is_empty() => {
            let mut p = policy(spec, &addrs)?;
            p.node_ips = vec![primary.primary_ip];
            p
        }
        _ => policy(spec, &addrs)?,
    };
    Ok((policy, enis))
}

/// The state in force, for `vpc.show`: the policy and the ENIs with their ports' names.
pub fn state_with(p: &SnatPolicy, enis: &[Eni], ports: &[PortState]) -> VpcState {
    let mut s = state(p);
    s.enis = enis
        .iter()
        .map(|e| VpcEniState {
            eni: e.spec.clone(),
            bound_port: ports
                .get(usize::from(e.port))
                .map(|p| p.name.clone())
                .unwrap_or_default(),
            table: e.table(),
        })
        .collect();
    s
}

/// The SNAT policy's part of the state in force.
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

    // ENIs.

    fn port(name: &str, role: PortRole, mac: [u8; 6], network: u16) -> PortState {
        PortState {
            name: name.into(),
            dpdk_id: 0,
            role,
            network,
            mac: EthernetAddress(mac),
            mtu: 1500,
            pod_mac: None,
            local_v4: vec![],
            local_v6: vec![],
            proxy_arp_v4: vec![],
            xconnect: None,
            pod_sources: Default::default(),
            locked: false,
        }
    }

    /// eth0 and eth1 (uplinks with the two ENIs' MACs), a pod port, an uplink in
    /// another network, two uplinks sharing a MAC.
    fn ports() -> Vec<PortState> {
        vec![
            port("eth0", PortRole::Uplink, [2, 0, 0, 0, 0, 0xa0], 0),
            port("eth1", PortRole::Uplink, [2, 0, 0, 0, 0, 0xa1], 0),
            port("pod", PortRole::Pod, [2, 0, 0, 0, 0, 0xa2], 0),
            port("blue", PortRole::Uplink, [2, 0, 0, 0, 0, 0xa3], 1),
            port("twin-a", PortRole::Uplink, [2, 0, 0, 0, 0, 0xa4], 0),
            port("twin-b", PortRole::Uplink, [2, 0, 0, 0, 0, 0xa4], 0),
        ]
    }

    fn eni(id: &str, mac: &str, index: u32, subnet: &str, secondaries: &[&str]) -> VpcEni {
        let base = subnet.trim_end_matches("0/24");
        VpcEni {
            id: id.into(),
            mac: mac.into(),
            device_index: index,
            subnet_cidr: subnet.into(),
            gateway: format!("{base}1"),
            primary_ip: format!("{base}10"),
            secondary_ips: secondaries.iter().map(|s| s.to_string()).collect(),
            port: None,
        }
    }

    /// ENI 0 on eth0 (10.0.0.0/24) and ENI 1 on eth1 (10.0.1.0/24), found by MAC.
    fn two_enis() -> VpcSync {
        VpcSync {
            vpc_cidrs: vec!["10.0.0.0/16".into()],
            enis: vec![
                eni(
                    "eni-0a",
                    "02:00:00:00:00:a0",
                    0,
                    "10.0.0.0/24",
                    &["10.0.0.20", "10.0.0.21"],
                ),
                eni(
                    "eni-1b",
                    "02:00:00:00:00:a1",
                    1,
                    "10.0.1.0/24",
                    &["10.0.1.20"],
                ),
            ],
            ..Default::default()
        }
    }

    #[test]
    fn enis_bind_to_their_ports_and_give_the_node_ip() {
        let (p, enis) = sync(&two_enis(), &ports(), &[]).expect("valid");
        assert_eq!(
            p.node_ips,
            vec![Ipv4Addr::new(10, 0, 0, 10)],
            "primary ENI's primary IP"
        );
        assert_eq!(enis.len(), 2);
        assert_eq!((enis[0].port, enis[1].port), (0, 1));
        assert_eq!(enis[1].gateway, Ipv4Addr::new(10, 0, 1, 1));
        assert_eq!(
            (enis[0].table(), enis[1].table()),
            ("main".into(), "eni-1".into())
        );
        let s = state_with(&p, &enis, &ports());
        assert_eq!(s.enis[1].bound_port, "eth1");
        assert_eq!(s.enis[1].table, "eni-1");
        assert_eq!(s.enis[1].eni, two_enis().enis[1]);
        // A port named explicitly; node_ips given win over the ENI's primary IP.
        let mut named = two_enis();
        named.enis[1].port = Some("twin-a".into());
        named.enis[1].mac = "02:00:00:00:00:b1".into();
        named.node_ips = vec!["192.0.2.10".into()];
        let (p, enis) = sync(&named, &ports(), &[Ipv4Addr::new(192, 0, 2, 10)]).expect("valid");
        assert_eq!(enis[1].port, 4);
        assert_eq!(p.node_ips, vec![Ipv4Addr::new(192, 0, 2, 10)]);
        // node_ips may name an ENI's primary IP (it becomes an uplink address).
        let mut own = two_enis();
        own.node_ips = vec!["10.0.1.10".into()];
        assert_eq!(
            sync(&own, &ports(), &[]).expect("valid").0.node_ips,
            vec![Ipv4Addr::new(10, 0, 1, 10)]
        );
        // No ENIs: as before.
        assert!(sync(&spec(&[], &[], None), &ports(), &[])
            .expect("valid")
            .1
            .is_empty());
    }

    #[test]
    fn eni_refusals_name_the_field() {
        type Edit = fn(&mut VpcSync);
        let cases: Vec<(Edit, &str, &str)> = vec![
            (
                |s| s.enis[1].id = "eni-xyz".into(),
                "enis[1].id",
                "not an ENI ID",
            ),
            (
                |s| s.enis[0].id = "vol-0a".into(),
                "enis[0].id",
                "not an ENI ID",
            ),
            (
                |s| s.enis[1].id = "eni-0a".into(),
                "enis[1].id",
                "also enis[0]",
            ),
            (
                |s| s.enis[1].mac = "02:00:00:00:00".into(),
                "enis[1].mac",
                "not a unicast MAC",
            ),
            (
                |s| s.enis[1].mac = "01:00:5e:00:00:01".into(),
                "enis[1].mac",
                "not a unicast MAC",
            ),
            (
                |s| s.enis[1].device_index = 0,
                "enis[1].device_index",
                "also enis[0]'s",
            ),
            (|s| s.enis[0].device_index = 2, "enis", "no primary ENI"),
            (
                |s| s.enis[1].subnet_cidr = "10.0.1.0".into(),
                "enis[1].subnet_cidr",
                "not an IPv4 CIDR",
            ),
            (
                |s| s.enis[1].subnet_cidr = "fd00::/64".into(),
                "enis[1].subnet_cidr",
                "not an IPv4 address",
            ),
            (
                |s| s.enis[1].subnet_cidr = "10.0.1.1/24".into(),
                "enis[1].subnet_cidr",
                "host bits",
            ),
            (
                |s| s.enis[1].gateway = "10.0.2.1".into(),
                "enis[1].gateway",
                "outside the ENI's subnet 10.0.1.0/24",
            ),
            (
                |s| s.enis[1].gateway = "gw".into(),
                "enis[1].gateway",
                "not an IPv4 address",
            ),
            (
                |s| s.enis[1].primary_ip = "10.0.0.10".into(),
                "enis[1].primary_ip",
                "outside the ENI's subnet",
            ),
            (
                |s| s.enis[1].primary_ip = "10.0.1.1".into(),
                "enis[1].primary_ip",
                "the subnet's gateway",
            ),
            (
                |s| s.enis[0].secondary_ips[1] = "10.0.9.9".into(),
                "enis[0].secondary_ips[1]",
                "outside",
            ),
            (
                |s| s.enis[0].secondary_ips[1] = "10.0.0.20".into(),
                "enis[0].secondary_ips[1]",
                "given twice on this ENI",
            ),
            (
                |s| s.enis[0].secondary_ips[1] = "10.0.0.10".into(),
                "enis[0].secondary_ips[1]",
                "given twice on this ENI",
            ),
            (
                |s| {
                    s.enis[1].subnet_cidr = "10.0.0.0/16".into();
                    s.enis[1].gateway = "10.0.0.1".into();
                    s.enis[1].primary_ip = "10.0.1.10".into();
                    s.enis[1].secondary_ips = vec!["10.0.0.21".into()];
                },
                "enis[1].secondary_ips[0]",
                "also on enis[0] (eni-0a)",
            ),
            (
                |s| s.enis[1].port = Some("eth9".into()),
                "enis[1].port",
                "no port named \"eth9\"",
            ),
            (
                |s| s.enis[1].port = Some("pod".into()),
                "enis[1].port",
                "a pod port, not an uplink",
            ),
            (
                |s| s.enis[1].port = Some("blue".into()),
                "enis[1].port",
                "not in the default network",
            ),
            (
                |s| s.enis[1].port = Some("eth0".into()),
                "enis[1].port",
                "already bound to enis[0] (eni-0a)",
            ),
            (
                |s| s.enis[1].mac = "02:00:00:00:00:ee".into(),
                "enis[1].port",
                "no uplink port has the ENI's MAC",
            ),
            (
                |s| s.enis[1].mac = "02:00:00:00:00:a4".into(),
                "enis[1].port",
                "twin-a, twin-b",
            ),
            (
                |s| s.node_ips = vec!["10.0.1.20".into()],
                "node_ips[0]",
                "not an address of an uplink port",
            ),
        ];
        for (edit, field, text) in cases {
            let mut s = two_enis();
            edit(&mut s);
            let e = sync(&s, &ports(), &[]).expect_err(field);
            assert_eq!(e.field, field, "{e:?}");
            assert!(e.message.contains(text), "{field}: {e:?}");
        }
    }
}
