//! The per-node plan and the IPAM.

use ferrule_networks::manifest::{parse_text, Object};
use ferrule_networks::plan::{node_plan, Ipam};
use ferrule_networks::validate::{validate_udn, NetworkConfig};
use ferrule_networks::Settings;
use std::net::IpAddr;

fn config(spec: &str) -> NetworkConfig {
    let text =
        format!("kind: UserDefinedNetwork\nmetadata: {{name: n, namespace: ns}}\nspec: {spec}\n");
    let Object::UserDefinedNetwork(u) = parse_text(&text).unwrap().remove(0) else {
        panic!()
    };
    validate_udn(&u, &Settings::default()).unwrap()
}

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

#[test]
fn layer3_gives_node_k_the_kth_host_subnet() {
    let c =
        config("{topology: Layer3, role: Primary, subnets: [10.128.0.0/16/24, '2600:db8::/29']}");
    for (k, v4, gw4, v6, gw6) in [
        (
            0,
            "10.128.0.0/24",
            "10.128.0.1",
            "2600:db8::/64",
            "2600:db8::1",
        ),
        (
            1,
            "10.128.1.0/24",
            "10.128.1.1",
            "2600:db8:0:1::/64",
            "2600:db8:0:1::1",
        ),
        (
            3,
            "10.128.3.0/24",
            "10.128.3.1",
            "2600:db8:0:3::/64",
            "2600:db8:0:3::1",
        ),
        (
            255,
            "10.128.255.0/24",
            "10.128.255.1",
            "2600:db8:0:ff::/64",
            "2600:db8:0:ff::1",
        ),
    ] {
        let p = node_plan(&c, k).unwrap();
        assert_eq!(p.node_index, k);
        assert_eq!(p.subnets[0].subnet.to_string(), "10.128.0.0/16");
        assert_eq!(p.subnets[0].node_subnet.to_string(), v4, "node {k}");
        assert_eq!(p.subnets[0].gateway, Some(ip(gw4)));
        assert_eq!(p.subnets[1].node_subnet.to_string(), v6, "node {k}");
        assert_eq!(p.subnets[1].gateway, Some(ip(gw6)));
    }
    let e = node_plan(&c, 256).unwrap_err();
    assert_eq!(
        e.to_string(),
        "node index 256 is beyond the 256 host subnets /24 of 10.128.0.0/16"
    );
    // A /26 split of a /24: 4 nodes.
    let c = config("{topology: Layer3, role: Secondary, subnets: [192.168.5.0/24/26]}");
    assert_eq!(
        node_plan(&c, 3).unwrap().subnets[0].node_subnet.to_string(),
        "192.168.5.192/26"
    );
    assert!(node_plan(&c, 4).is_err());
}

#[test]
fn layer2_and_localnet_share_the_whole_subnet() {
    let c = config("{topology: Layer2, role: Primary, subnets: [10.0.0.0/24]}");
    let p = node_plan(&c, 7).unwrap();
    assert_eq!(p.subnets[0].node_subnet.to_string(), "10.0.0.0/24");
    assert_eq!(p.subnets[0].gateway, Some(ip("10.0.0.1")));
    let c = config("{topology: Localnet, role: Secondary, subnets: [192.168.10.0/24]}");
    let p = node_plan(&c, 7).unwrap();
    assert_eq!(p.subnets[0].node_subnet.to_string(), "192.168.10.0/24");
    assert_eq!(p.subnets[0].gateway, None);
}

#[test]
fn ipam_skips_network_gateway_broadcast_and_exclusions() {
    // The seed's CUDN example: 10.0.0.0/24 minus "10.0.0.100/26" (10.0.0.64/26).
    let c = config("{topology: Layer2, role: Primary, subnets: [10.0.0.0/24], excludeSubnets: [10.0.0.100/26, 10.0.0.2/32]}");
    let p = node_plan(&c, 0).unwrap();
    let mut ipam = Ipam::new(&c, &p).unwrap();
    assert_eq!(ipam.allocate("pod-a"), Some(vec![ip("10.0.0.3")]));
    // Idempotent per owner.
    assert_eq!(ipam.allocate("pod-a"), Some(vec![ip("10.0.0.3")]));
    let mut last = None;
    for i in 0..60 {
        last = ipam.allocate(&format!("p{i}"));
    }
    // .3–.63 is 61 addresses: pod-a and p0..p59; the next skips the exclusion.
    assert_eq!(last, Some(vec![ip("10.0.0.63")]));
    assert_eq!(ipam.allocate("after"), Some(vec![ip("10.0.0.128")]));
    // Released addresses come back lowest first.
    assert_eq!(ipam.release(ip("10.0.0.10")), Some("p6".to_string()));
    assert_eq!(ipam.release(ip("10.0.0.10")), None);
    assert_eq!(ipam.allocate("again"), Some(vec![ip("10.0.0.10")]));
    assert_eq!(ipam.release_owner("again"), vec![ip("10.0.0.10")]);
    assert!(ipam.addresses_of("again").is_empty());
}

#[test]
fn ipam_exhaustion_and_broadcast() {
    let c = config("{topology: Layer2, role: Secondary, subnets: [10.0.0.0/29], excludeSubnets: [10.0.0.4/31]}");
    let p = node_plan(&c, 0).unwrap();
    let mut ipam = Ipam::new(&c, &p).unwrap();
    // .0 network, .1 gateway, .4/.5 excluded, .7 broadcast.
    let got: Vec<_> = (0..3)
        .map(|i| ipam.allocate(&format!("p{i}")).unwrap()[0])
        .collect();
    assert_eq!(got, [ip("10.0.0.2"), ip("10.0.0.3"), ip("10.0.0.6")]);
    assert_eq!(ipam.allocate("full"), None);
    assert_eq!(ipam.len(), 3);
    ipam.release(ip("10.0.0.3"));
    assert_eq!(ipam.allocate("full"), Some(vec![ip("10.0.0.3")]));
}

#[test]
fn ipam_dual_stack_gives_one_address_per_family() {
    let c = config("{topology: Layer2, role: Secondary, subnets: [10.0.0.0/30, 'fd00:10::/126']}");
    let p = node_plan(&c, 0).unwrap();
    let mut ipam = Ipam::new(&c, &p).unwrap();
    assert_eq!(
        ipam.allocate("a"),
        Some(vec![ip("10.0.0.2"), ip("fd00:10::2")])
    );
    // IPv4 is full (.3 is the broadcast address): nothing is allocated, not even IPv6.
    assert_eq!(ipam.allocate("b"), None);
    assert_eq!(ipam.len(), 2);
}

#[test]
fn ipam_v6_layer3_uses_the_node_subnet() {
    let c = config("{topology: Layer3, role: Secondary, subnets: ['fd00:20::/48/120']}");
    let p = node_plan(&c, 2).unwrap();
    assert_eq!(p.subnets[0].node_subnet.to_string(), "fd00:20::200/120");
    let mut ipam = Ipam::new(&c, &p).unwrap();
    assert_eq!(ipam.allocate("a"), Some(vec![ip("fd00:20::202")]));
    for i in 0..253 {
        assert!(ipam.allocate(&format!("p{i}")).is_some(), "{i}");
    }
    // ::200 network, ::201 gateway, ::202..=::2ff (254 addresses, the last included).
    assert_eq!(ipam.addresses_of("p252"), vec![ip("fd00:20::2ff")]);
    assert_eq!(ipam.allocate("full"), None);
}

#[test]
fn ipam_owners_restore_into_a_new_ipam() {
    let c = config("{topology: Layer2, role: Secondary, subnets: [10.0.0.0/24, 'fd00:10::/64'], excludeSubnets: [10.0.0.128/25]}");
    let p = node_plan(&c, 0).unwrap();
    let mut ipam = Ipam::new(&c, &p).unwrap();
    ipam.allocate("a").unwrap();
    ipam.allocate("b").unwrap();
    ipam.release(ip("10.0.0.2"));
    let saved = ipam.owners();
    assert_eq!(saved.len(), 3);

    let mut fresh = Ipam::new(&c, &p).unwrap();
    for (addr, owner) in &saved {
        fresh.restore(*addr, owner).unwrap();
    }
    assert_eq!(fresh.owners(), saved);
    fresh.restore(ip("10.0.0.3"), "b").unwrap();
    assert!(fresh
        .restore(ip("10.0.0.3"), "c")
        .unwrap_err()
        .contains("already allocated"));
    assert!(fresh
        .restore(ip("10.0.0.200"), "c")
        .unwrap_err()
        .contains("not an assignable"));
    assert!(fresh.restore(ip("10.0.0.1"), "c").is_err());
    assert!(fresh.restore(ip("10.1.0.5"), "c").is_err());
    assert!(fresh
        .restore(ip("10.0.0.9"), "b")
        .unwrap_err()
        .contains("already has"));
    // The lowest free address is the released one.
    assert_eq!(fresh.allocate("c").unwrap()[0], ip("10.0.0.2"));
}

#[test]
fn no_ipam_when_disabled() {
    let c = config("{topology: Layer2, role: Secondary, ipam: {mode: Disabled}}");
    let p = node_plan(&c, 0).unwrap();
    assert!(p.subnets.is_empty());
    assert!(Ipam::new(&c, &p).is_none());
}
