//! What the pipeline tests share: a hand-built snapshot of the demo topology (two pods
//! and an uplink with routes and a resolved neighbour), the same with SNAT on, and
//! builders of ACL rules and TCP segments.

#![allow(dead_code)]

use etherparse::PacketBuilder;
use ferrule_dataplane::acl::table::Table;
use ferrule_dataplane::acl::{self, Action as AclAction, PortRange, Prefix, Proto, Rule};
use ferrule_dataplane::lpm::{Lpm4, Lpm6};
use ferrule_dataplane::nat::SnatPolicy;
use ferrule_dataplane::snapshot::{
    Neighbor, Network, NextHopEntry, PodSources, PortRole, PortState, Snapshot,
};
use ferrule_dataplane::wire::EthernetAddress;
use ferrule_dataplane::wire::Ipv4Cidr;
use rustc_hash::FxHashMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::sync::Arc;

pub const GW_MAC_A: [u8; 6] = [2, 0xfe, 0, 0, 0, 0xa];
pub const GW_MAC_B: [u8; 6] = [2, 0xfe, 0, 0, 0, 0xb];
pub const UPLINK_MAC: [u8; 6] = [2, 0xfe, 0, 0, 0, 0xc];
pub const POD_A: [u8; 6] = [2, 0, 0, 0, 1, 2];
pub const POD_B: [u8; 6] = [2, 0, 0, 0, 1, 3];
pub const ROUTER: [u8; 6] = [2, 0, 0, 0, 9, 1];
pub const GW4: Ipv4Addr = Ipv4Addr::new(169, 254, 1, 1);
pub const GW6: Ipv6Addr = Ipv6Addr::new(0xfe80, 0, 0, 0, 0, 0, 0, 1);

pub fn v6(s: &str) -> Ipv6Addr {
    s.parse().expect("ipv6")
}

/// pod-a (0) 10.1.0.2, pod-b (1) 10.1.0.3 mtu 1400, uplink (2) 192.0.2.10/24 with a
/// default route via 192.0.2.1 (resolved) and 198.51.100.0/24 via 192.0.2.99
/// (unresolved); 203.0.113.0/24 blackholed; fd00:1::2 and ::3 on the pods, each pod
/// port accepting its pod's two addresses as source.
pub fn snapshot() -> Snapshot {
    let pod = |name: &str, mac, pod_mac, mtu, ips: [IpAddr; 2]| PortState {
        name: name.into(),
        dpdk_id: 0,
        role: PortRole::Pod,
        network: 0,
        mac: EthernetAddress(mac),
        mtu,
        pod_mac: Some(EthernetAddress(pod_mac)),
        local_v4: vec![GW4],
        local_v6: vec![GW6],
        proxy_arp_v4: Vec::new(),
        xconnect: None,
        pod_sources: PodSources::new(Some(EthernetAddress(pod_mac)), &ips, &[]),
        locked: false,
    };
    let ports = vec![
        pod(
            "pod-a",
            GW_MAC_A,
            POD_A,
            1500,
            [Ipv4Addr::new(10, 1, 0, 2).into(), v6("fd00:1::2").into()],
        ),
        pod(
            "pod-b",
            GW_MAC_B,
            POD_B,
            1400,
            [Ipv4Addr::new(10, 1, 0, 3).into(), v6("fd00:1::3").into()],
        ),
        PortState {
            name: "uplink0".into(),
            dpdk_id: 2,
            role: PortRole::Uplink,
            network: 0,
            mac: EthernetAddress(UPLINK_MAC),
            mtu: 1500,
            pod_mac: None,
            local_v4: vec![Ipv4Addr::new(192, 0, 2, 10)],
            local_v6: vec![v6("2001:db8::10")],
            proxy_arp_v4: Vec::new(),
            xconnect: None,
            pod_sources: PodSources::default(),
            locked: false,
        },
    ];
    let next_hops = vec![
        NextHopEntry::Port { port: 0, via: None },
        NextHopEntry::Port { port: 1, via: None },
        NextHopEntry::Port { port: 2, via: None },
        NextHopEntry::Port {
            port: 2,
            via: Some(IpAddr::V4(Ipv4Addr::new(192, 0, 2, 1))),
        },
        NextHopEntry::Local,
        NextHopEntry::Blackhole,
        NextHopEntry::Port {
            port: 2,
            via: Some(IpAddr::V4(Ipv4Addr::new(192, 0, 2, 99))),
        },
    ];
    let mut l4 = Lpm4::new();
    l4.insert(Ipv4Addr::new(10, 1, 0, 2), 32, 0).expect("route");
    l4.insert(Ipv4Addr::new(10, 1, 0, 3), 32, 1).expect("route");
    l4.insert(Ipv4Addr::new(192, 0, 2, 0), 24, 2)
        .expect("route");
    l4.insert(Ipv4Addr::new(192, 0, 2, 10), 32, 4)
        .expect("route");
    l4.insert(Ipv4Addr::UNSPECIFIED, 0, 3).expect("route");
    l4.insert(Ipv4Addr::new(203, 0, 113, 0), 24, 5)
        .expect("route");
    l4.insert(Ipv4Addr::new(198, 51, 100, 0), 24, 6)
        .expect("route");
    let mut l6 = Lpm6::new();
    l6.insert(v6("fd00:1::2"), 128, 0).expect("route");
    l6.insert(v6("fd00:1::3"), 128, 1).expect("route");
    let mut neighbors = FxHashMap::default();
    neighbors.insert(
        (0u16, IpAddr::V4(Ipv4Addr::new(192, 0, 2, 1))),
        Neighbor {
            mac: EthernetAddress(ROUTER),
            port: 2,
        },
    );
    let mut snap = Snapshot {
        generation: 1,
        ports,
        networks: vec![Network {
            name: "default".into(),
            lpm4: Arc::new(l4),
            lpm6: Arc::new(l6),
            gateway_v4: GW4,
            gateway_v6: GW6,
            user_defined: false,
        }],
        next_hops: Arc::new(next_hops),
        neighbors: Arc::new(neighbors),
        nh_mac: Default::default(),
        acl: Default::default(),
        snat: Default::default(),
        locked_allow: Default::default(),
        any_locked: false,
        switching: Default::default(),
        source_routes: None,
        identities: Default::default(),
        dns: None,
    };
    // The gateways of resolved routes, as the control thread precomputes them.
    snap.resolve_gateways();
    snap
}

pub fn rule(action: AclAction, proto: Proto, dst: &str, dst_port: Option<u16>) -> Rule {
    let mut r = Rule::any(action);
    r.proto = proto;
    r.dst = Prefix::parse(dst, acl::RuleField::Dst).expect("prefix");
    if let Some(p) = dst_port {
        r.dst_port = PortRange::single(p);
    }
    r
}

/// Counter slot of table `t` rule `r`: `t * 100 + r`; no match: `t * 100 + 99`.
pub fn table(t: u32, name: &str, rules: Vec<Rule>) -> Arc<Table> {
    let slots = (0..rules.len() as u32).map(|r| t * 100 + r).collect();
    Arc::new(Table::compile(name.into(), rules, slots, t * 100 + 99).expect("compile"))
}

pub const NODE: [u8; 4] = [192, 0, 2, 10];

/// The common snapshot with SNAT to 192.0.2.10 outside 192.0.2.0/24 and 10.1.0.0/16.
pub fn snat_snapshot(ports: Vec<(u16, u16)>) -> Snapshot {
    let mut snap = snapshot();
    snap.snat = Arc::new(SnatPolicy {
        node_ips: vec![Ipv4Addr::from(NODE)],
        vpc_cidrs: vec![
            Ipv4Cidr::new(Ipv4Addr::new(192, 0, 2, 0), 24).expect("valid"),
            Ipv4Cidr::new(Ipv4Addr::new(10, 1, 0, 0), 16).expect("valid"),
        ],
        exclude: vec![],
        ports,
    });
    snap
}

#[derive(Clone, Copy)]
pub enum Tcp {
    Syn,
    SynAck(u32),
    Ack(u32),
    Rst(u32),
}

/// A TCP segment between two MACs.
#[allow(clippy::too_many_arguments)]
pub fn tcp(
    mac: ([u8; 6], [u8; 6]),
    src: [u8; 4],
    dst: [u8; 4],
    sport: u16,
    dport: u16,
    seq: u32,
    kind: Tcp,
    payload: &[u8],
) -> Vec<u8> {
    let b = PacketBuilder::ethernet2(mac.0, mac.1)
        .ipv4(src, dst, 64)
        .tcp(sport, dport, seq, 65535);
    let b = match kind {
        Tcp::Syn => b.syn(),
        Tcp::SynAck(ack) => b.syn().ack(ack),
        Tcp::Ack(ack) => b.ack(ack),
        Tcp::Rst(ack) => b.rst().ack(ack),
    };
    let mut f = Vec::new();
    b.write(&mut f, payload).expect("build");
    f
}
