//! The pipeline on byte buffers, without the EAL: frames built by etherparse go
//! through `pipeline::process` against a hand-built snapshot; results are decoded by
//! etherparse again (an independent implementation) — MACs, TTL, checksums, ICMP.

mod common;

use common::*;
use etherparse::{Icmpv4Type, Icmpv6Type, NetSlice, PacketBuilder, SlicedPacket, TransportSlice};
use ferrule_dataplane::acl::table::AclTables;
use ferrule_dataplane::acl::{Action as AclAction, Proto};
use ferrule_dataplane::counters::{DropReason, WorkerCounters, MAX_PORTS};
use ferrule_dataplane::pipeline::{
    self, icmp_error, Action, IcmpErrorKind, NoTrace, Punt, Recorder,
};
use ferrule_dataplane::snapshot::{PodSources, Snapshot};
use ferrule_dataplane::wire::{EthernetAddress, IpCidr};
use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;

fn udp4(
    src_mac: [u8; 6],
    dst_mac: [u8; 6],
    src: [u8; 4],
    dst: [u8; 4],
    ttl: u8,
    len: usize,
) -> Vec<u8> {
    let mut f = Vec::new();
    PacketBuilder::ethernet2(src_mac, dst_mac)
        .ipv4(src, dst, ttl)
        .udp(5000, 53)
        .write(&mut f, &vec![0xab; len])
        .expect("build");
    f
}

fn run(snap: &Snapshot, port: u16, frame: &mut [u8]) -> Action {
    pipeline::process(snap, port, frame, &mut NoTrace)
}

#[test]
fn pod_to_pod_forwarding_rewrites_macs_and_ttl_with_valid_checksums() {
    let snap = snapshot();
    let mut f = udp4(POD_A, GW_MAC_A, [10, 1, 0, 2], [10, 1, 0, 3], 64, 100);
    assert_eq!(run(&snap, 0, &mut f), Action::Forward { port: 1 });
    let p = SlicedPacket::from_ethernet(&f).expect("parses");
    let eth = p.link.as_ref().and_then(|l| l.to_header()).expect("eth");
    let eth = match eth {
        etherparse::LinkHeader::Ethernet2(e) => e,
        _ => panic!("not ethernet"),
    };
    assert_eq!(eth.source, GW_MAC_B);
    assert_eq!(eth.destination, POD_B);
    let Some(NetSlice::Ipv4(ip)) = p.net else {
        panic!("not ipv4")
    };
    let h = ip.header().to_header();
    assert_eq!(h.time_to_live, 63);
    assert_eq!(
        h.header_checksum,
        h.calc_header_checksum(),
        "incremental IPv4 checksum"
    );
    let Some(TransportSlice::Udp(udp)) = p.transport else {
        panic!("not udp")
    };
    let want = udp
        .to_header()
        .calc_checksum_ipv4(&h, udp.payload())
        .expect("checksum");
    assert_eq!(udp.checksum(), want, "UDP untouched and valid");
}

#[test]
fn default_route_uses_the_resolved_neighbor_and_unresolved_ones_are_punted() {
    let snap = snapshot();
    let mut f = udp4(POD_A, GW_MAC_A, [10, 1, 0, 2], [8, 8, 8, 8], 64, 10);
    assert_eq!(run(&snap, 0, &mut f), Action::Forward { port: 2 });
    assert_eq!(&f[0..6], &ROUTER);
    assert_eq!(&f[6..12], &UPLINK_MAC);
    let orig = udp4(POD_A, GW_MAC_A, [10, 1, 0, 2], [198, 51, 100, 7], 64, 10);
    let mut f = orig.clone();
    assert_eq!(
        run(&snap, 0, &mut f),
        Action::Punt(Punt::Resolve {
            network: 0,
            ip: IpAddr::V4(Ipv4Addr::new(192, 0, 2, 99)),
            port: 2
        })
    );
    assert_eq!(f, orig, "a punted packet is left as received");
    // On-link on the uplink's connected subnet: the destination itself is resolved.
    let mut f = udp4(POD_A, GW_MAC_A, [10, 1, 0, 2], [192, 0, 2, 55], 64, 10);
    assert_eq!(
        run(&snap, 0, &mut f),
        Action::Punt(Punt::Resolve {
            network: 0,
            ip: IpAddr::V4(Ipv4Addr::new(192, 0, 2, 55)),
            port: 2
        })
    );
}

#[test]
fn drops_have_reasons() {
    let snap = snapshot();
    let mut f = udp4(POD_A, GW_MAC_A, [10, 1, 0, 2], [203, 0, 113, 5], 64, 10);
    assert_eq!(run(&snap, 0, &mut f), Action::Drop(DropReason::Blackhole));
    let mut f = udp4(
        POD_A,
        [2, 9, 9, 9, 9, 9],
        [10, 1, 0, 2],
        [10, 1, 0, 3],
        64,
        10,
    );
    assert_eq!(
        run(&snap, 0, &mut f),
        Action::Drop(DropReason::DstMacMismatch)
    );
    // IPv6 to an address with no route.
    let mut f = Vec::new();
    PacketBuilder::ethernet2(POD_A, GW_MAC_A)
        .ipv6(v6("fd00:1::2").octets(), v6("fd00:9::1").octets(), 64)
        .udp(1, 2)
        .write(&mut f, &[0; 8])
        .expect("build");
    assert_eq!(
        run(&snap, 0, &mut f),
        Action::IcmpError {
            kind: IcmpErrorKind::NoRoute,
            reason: DropReason::NoRoute
        }
    );
    // The destination unreachable goes back from the gateway, checked by etherparse.
    let parsed = pipeline::parse(&f, 0).expect("parses");
    let mut out = vec![0u8; icmp_error::MAX_ERROR_FRAME];
    let len = icmp_error::build(
        &snap.ports[0],
        &parsed,
        &f,
        IcmpErrorKind::NoRoute,
        &mut out,
    )
    .expect("allowed");
    let p = SlicedPacket::from_ethernet(&out[..len]).expect("parses");
    let Some(NetSlice::Ipv6(ip)) = &p.net else {
        panic!("ipv6")
    };
    let h = ip.header().to_header();
    assert_eq!(h.source, GW6.octets());
    let Some(TransportSlice::Icmpv6(icmp)) = &p.transport else {
        panic!("icmpv6")
    };
    assert!(
        matches!(icmp.icmp_type(), Icmpv6Type::DestinationUnreachable(_)),
        "{:?}",
        icmp.icmp_type()
    );
    let want = icmp
        .icmp_type()
        .calc_checksum(h.source, h.destination, icmp.payload())
        .expect("sum");
    assert_eq!(icmp.checksum(), want);
    // 802.1Q tagged.
    let mut f = Vec::new();
    PacketBuilder::ethernet2(POD_A, GW_MAC_A)
        .single_vlan(etherparse::VlanId::try_new(5).expect("vid"))
        .ipv4([10, 1, 0, 2], [10, 1, 0, 3], 64)
        .udp(1, 2)
        .write(&mut f, &[0; 8])
        .expect("build");
    assert_eq!(run(&snap, 0, &mut f), Action::Drop(DropReason::VlanTagged));
    // Malformed: truncated in the IPv4 header, bad IHL, bad header checksum, bad total length.
    let good = udp4(POD_A, GW_MAC_A, [10, 1, 0, 2], [10, 1, 0, 3], 64, 10);
    for cut in [0, 10, 14, 20, 33] {
        let mut f = good[..cut].to_vec();
        assert_eq!(
            run(&snap, 0, &mut f),
            Action::Drop(DropReason::Malformed),
            "cut at {cut}"
        );
    }
    let mut f = good.clone();
    f[14] = 0x44; // IHL 4
    assert_eq!(run(&snap, 0, &mut f), Action::Drop(DropReason::Malformed));
    let mut f = good.clone();
    f[24] ^= 0xff; // checksum
    assert_eq!(run(&snap, 0, &mut f), Action::Drop(DropReason::Malformed));
    let mut f = good.clone();
    f[16] = 0x0f; // total length past the buffer
    assert_eq!(run(&snap, 0, &mut f), Action::Drop(DropReason::Malformed));
    let mut f = good;
    f[12] = 0x88;
    f[13] = 0xcc; // LLDP
    assert_eq!(run(&snap, 0, &mut f), Action::Drop(DropReason::NotIp));
}

/// An ARP request written out byte by byte (RFC 826 layout).
fn arp_request(sender_mac: [u8; 6], sender_ip: [u8; 4], target_ip: [u8; 4]) -> Vec<u8> {
    let mut f = Vec::new();
    f.extend_from_slice(&[0xff; 6]);
    f.extend_from_slice(&sender_mac);
    f.extend_from_slice(&[0x08, 0x06]);
    f.extend_from_slice(&[0, 1, 0x08, 0x00, 6, 4, 0, 1]);
    f.extend_from_slice(&sender_mac);
    f.extend_from_slice(&sender_ip);
    f.extend_from_slice(&[0; 6]);
    f.extend_from_slice(&target_ip);
    f.resize(60, 0); // Ethernet minimum, padded
    f
}

#[test]
fn arp_for_the_gateway_is_answered_in_place() {
    let snap = snapshot();
    let mut f = arp_request(POD_A, [10, 1, 0, 2], GW4.octets());
    assert_eq!(run(&snap, 0, &mut f), Action::Reply);
    assert_eq!(&f[0..6], &POD_A, "to the asker");
    assert_eq!(&f[6..12], &GW_MAC_A, "from the pod port's gateway MAC");
    assert_eq!(&f[12..14], &[0x08, 0x06]);
    assert_eq!(
        &f[14..22],
        &[0, 1, 0x08, 0x00, 6, 4, 0, 2],
        "an Ethernet/IPv4 reply"
    );
    assert_eq!(&f[22..28], &GW_MAC_A, "sender hardware address");
    assert_eq!(&f[28..32], &GW4.octets(), "sender protocol address");
    assert_eq!(&f[32..38], &POD_A, "target hardware address");
    assert_eq!(&f[38..42], &[10, 1, 0, 2], "target protocol address");
    // Not for one of our addresses: ignored; an uplink answers for the node IP.
    let mut f = arp_request(POD_A, [10, 1, 0, 2], [10, 1, 0, 3]);
    assert_eq!(run(&snap, 0, &mut f), Action::Drop(DropReason::ArpIgnored));
    let mut f = arp_request(ROUTER, [192, 0, 2, 1], [192, 0, 2, 10]);
    assert_eq!(run(&snap, 2, &mut f), Action::Reply);
    assert_eq!(&f[22..28], &UPLINK_MAC);
    // A reply to us is punted to be learned.
    let mut f = arp_request(ROUTER, [192, 0, 2, 1], [192, 0, 2, 10]);
    f[0..6].copy_from_slice(&UPLINK_MAC);
    f[21] = 2;
    f[32..38].copy_from_slice(&UPLINK_MAC);
    assert_eq!(run(&snap, 2, &mut f), Action::Punt(Punt::Learn));
    assert_eq!(
        pipeline::local::learned(&f),
        Some((
            IpAddr::V4(Ipv4Addr::new(192, 0, 2, 1)),
            EthernetAddress(ROUTER)
        ))
    );
}

#[test]
fn echo_to_the_gateway_is_answered_v4_and_v6() {
    let snap = snapshot();
    let mut f = Vec::new();
    PacketBuilder::ethernet2(POD_A, GW_MAC_A)
        .ipv4([10, 1, 0, 2], GW4.octets(), 64)
        .icmpv4_echo_request(77, 3)
        .write(&mut f, b"ping payload")
        .expect("build");
    assert_eq!(run(&snap, 0, &mut f), Action::Reply);
    let p = SlicedPacket::from_ethernet(&f).expect("parses");
    let Some(NetSlice::Ipv4(ip)) = &p.net else {
        panic!("ipv4")
    };
    let h = ip.header().to_header();
    assert_eq!((h.source, h.destination), (GW4.octets(), [10, 1, 0, 2]));
    assert_eq!(h.header_checksum, h.calc_header_checksum());
    let Some(TransportSlice::Icmpv4(icmp)) = &p.transport else {
        panic!("icmp")
    };
    assert!(matches!(icmp.icmp_type(), Icmpv4Type::EchoReply(e) if e.id == 77 && e.seq == 3));
    assert_eq!(
        icmp.checksum(),
        icmp.icmp_type().calc_checksum(icmp.payload())
    );
    assert_eq!(icmp.payload(), b"ping payload");

    let mut f = Vec::new();
    PacketBuilder::ethernet2(POD_A, GW_MAC_A)
        .ipv6(v6("fd00:1::2").octets(), GW6.octets(), 64)
        .icmpv6_echo_request(9, 1)
        .write(&mut f, b"v6")
        .expect("build");
    assert_eq!(run(&snap, 0, &mut f), Action::Reply);
    let p = SlicedPacket::from_ethernet(&f).expect("parses");
    let Some(NetSlice::Ipv6(ip)) = &p.net else {
        panic!("ipv6")
    };
    let h = ip.header().to_header();
    assert_eq!(
        (h.source, h.destination),
        (GW6.octets(), v6("fd00:1::2").octets())
    );
    let Some(TransportSlice::Icmpv6(icmp)) = &p.transport else {
        panic!("icmpv6")
    };
    assert!(matches!(icmp.icmp_type(), Icmpv6Type::EchoReply(e) if e.id == 9));
    let want = icmp
        .icmp_type()
        .calc_checksum(h.source, h.destination, icmp.payload())
        .expect("sum");
    assert_eq!(icmp.checksum(), want);
}

#[test]
fn neighbor_solicitation_for_the_gateway_is_advertised() {
    let snap = snapshot();
    let target = GW6;
    let group = pipeline::local::solicited_node(&target);
    // NS built by etherparse: type 135 with an SLL option.
    let mut body = vec![0u8; 4];
    body.extend_from_slice(&target.octets());
    body.extend_from_slice(&[1, 1]);
    body.extend_from_slice(&POD_A);
    let mut f = Vec::new();
    PacketBuilder::ethernet2(POD_A, [0x33, 0x33, 0xff, 0, 0, 1])
        .ipv6(v6("fe80::2").octets(), group.octets(), 255)
        .icmpv6(Icmpv6Type::Unknown {
            type_u8: 135,
            code_u8: 0,
            bytes5to8: [0; 4],
        })
        .write(&mut f, &body[4..])
        .expect("build");
    assert_eq!(run(&snap, 0, &mut f), Action::Reply);
    let p = SlicedPacket::from_ethernet(&f).expect("parses");
    let Some(NetSlice::Ipv6(ip)) = &p.net else {
        panic!("ipv6")
    };
    let h = ip.header().to_header();
    assert_eq!(h.source, GW6.octets());
    assert_eq!(h.destination, v6("fe80::2").octets());
    assert_eq!(h.hop_limit, 255);
    let Some(TransportSlice::Icmpv6(icmp)) = &p.transport else {
        panic!("icmpv6")
    };
    assert_eq!(icmp.icmp_type().type_u8(), 136);
    let want = icmp
        .icmp_type()
        .calc_checksum(h.source, h.destination, icmp.payload())
        .expect("sum");
    assert_eq!(icmp.checksum(), want, "NA checksum");
    assert_eq!(&icmp.payload()[..16], &GW6.octets(), "target");
    assert_eq!(&icmp.payload()[16..18], &[2, 1], "target link-layer option");
    assert_eq!(&icmp.payload()[18..24], &GW_MAC_A);
    let learned = pipeline::local::learned(&f).expect("an NA is learnable");
    assert_eq!(learned, (IpAddr::V6(GW6), EthernetAddress(GW_MAC_A)));
}

#[test]
fn ttl_expiry_sends_time_exceeded_quoting_the_packet() {
    let snap = snapshot();
    let orig = udp4(POD_A, GW_MAC_A, [10, 1, 0, 2], [10, 1, 0, 3], 1, 30);
    let mut f = orig.clone();
    let action = run(&snap, 0, &mut f);
    assert_eq!(
        action,
        Action::IcmpError {
            kind: IcmpErrorKind::TimeExceeded,
            reason: DropReason::TtlExceeded
        }
    );
    let parsed = pipeline::parse(&f, 0).expect("parses");
    let mut out = vec![0u8; icmp_error::MAX_ERROR_FRAME];
    let len = icmp_error::build(
        &snap.ports[0],
        &parsed,
        &f,
        IcmpErrorKind::TimeExceeded,
        &mut out,
    )
    .expect("an error is allowed");
    let p = SlicedPacket::from_ethernet(&out[..len]).expect("parses");
    let Some(NetSlice::Ipv4(ip)) = &p.net else {
        panic!("ipv4")
    };
    let h = ip.header().to_header();
    assert_eq!((h.source, h.destination), (GW4.octets(), [10, 1, 0, 2]));
    assert_eq!(h.header_checksum, h.calc_header_checksum());
    let Some(TransportSlice::Icmpv4(icmp)) = &p.transport else {
        panic!("icmp")
    };
    assert!(matches!(icmp.icmp_type(), Icmpv4Type::TimeExceeded(_)));
    assert_eq!(
        icmp.checksum(),
        icmp.icmp_type().calc_checksum(icmp.payload())
    );
    assert_eq!(
        icmp.payload(),
        &orig[14..],
        "the whole original IP packet is quoted"
    );
    assert_eq!(&out[0..6], &POD_A);
}

#[test]
fn mtu_exceeded_sends_frag_needed_or_packet_too_big() {
    let snap = snapshot();
    let mut f = udp4(POD_A, GW_MAC_A, [10, 1, 0, 2], [10, 1, 0, 3], 64, 1400);
    // etherparse sets DF on IPv4 by default.
    let a = run(&snap, 0, &mut f);
    assert_eq!(
        a,
        Action::IcmpError {
            kind: IcmpErrorKind::FragNeeded { mtu: 1400 },
            reason: DropReason::MtuExceeded
        }
    );
    let parsed = pipeline::parse(&f, 0).expect("parses");
    let mut out = vec![0u8; icmp_error::MAX_ERROR_FRAME];
    let len = icmp_error::build(
        &snap.ports[0],
        &parsed,
        &f,
        IcmpErrorKind::FragNeeded { mtu: 1400 },
        &mut out,
    )
    .expect("allowed");
    assert!(len <= 14 + 576);
    let p = SlicedPacket::from_ethernet(&out[..len]).expect("parses");
    let Some(TransportSlice::Icmpv4(icmp)) = &p.transport else {
        panic!("icmp")
    };
    match icmp.icmp_type() {
        Icmpv4Type::DestinationUnreachable(
            etherparse::icmpv4::DestUnreachableHeader::FragmentationNeeded { next_hop_mtu },
        ) => assert_eq!(next_hop_mtu, 1400),
        other => panic!("unexpected {other:?}"),
    }
    // Without DF: dropped, no error.
    f[14 + 6] &= !0x40;
    let h = etherparse::Ipv4HeaderSlice::from_slice(&f[14..])
        .expect("ip")
        .to_header();
    let c = h.calc_header_checksum();
    f[24..26].copy_from_slice(&c.to_be_bytes());
    assert_eq!(run(&snap, 0, &mut f), Action::Drop(DropReason::MtuExceeded));

    let mut f = Vec::new();
    PacketBuilder::ethernet2(POD_A, GW_MAC_A)
        .ipv6(v6("fd00:1::2").octets(), v6("fd00:1::3").octets(), 64)
        .udp(1, 2)
        .write(&mut f, &[0; 1400])
        .expect("build");
    let a = run(&snap, 0, &mut f);
    assert_eq!(
        a,
        Action::IcmpError {
            kind: IcmpErrorKind::PacketTooBig { mtu: 1400 },
            reason: DropReason::MtuExceeded
        }
    );
    let parsed = pipeline::parse(&f, 0).expect("parses");
    let len = icmp_error::build(
        &snap.ports[0],
        &parsed,
        &f,
        IcmpErrorKind::PacketTooBig { mtu: 1400 },
        &mut out,
    )
    .expect("allowed");
    assert!(len <= 14 + 1280);
    let p = SlicedPacket::from_ethernet(&out[..len]).expect("parses");
    let Some(NetSlice::Ipv6(ip)) = &p.net else {
        panic!("ipv6")
    };
    let h = ip.header().to_header();
    let Some(TransportSlice::Icmpv6(icmp)) = &p.transport else {
        panic!("icmpv6")
    };
    assert!(matches!(
        icmp.icmp_type(),
        Icmpv6Type::PacketTooBig { mtu: 1400 }
    ));
    let want = icmp
        .icmp_type()
        .calc_checksum(h.source, h.destination, icmp.payload())
        .expect("sum");
    assert_eq!(icmp.checksum(), want);
}

#[test]
fn no_error_about_an_error() {
    let snap = snapshot();
    // An ICMP time exceeded (itself an error) with TTL 1: dropped without an error.
    let mut f = Vec::new();
    PacketBuilder::ethernet2(POD_A, GW_MAC_A)
        .ipv4([10, 1, 0, 2], [10, 1, 0, 3], 1)
        .icmpv4(Icmpv4Type::TimeExceeded(
            etherparse::icmpv4::TimeExceededCode::TtlExceededInTransit,
        ))
        .write(&mut f, &[0x45; 28])
        .expect("build");
    let parsed = pipeline::parse(&f, 0).expect("parses");
    assert!(!icmp_error::allowed(&parsed, &f));
    let mut g = f.clone();
    assert!(
        matches!(run(&snap, 0, &mut g), Action::IcmpError { .. }),
        "TTL runs out"
    );
    let mut out = vec![0u8; icmp_error::MAX_ERROR_FRAME];
    assert_eq!(
        icmp_error::build(
            &snap.ports[0],
            &parsed,
            &f,
            IcmpErrorKind::TimeExceeded,
            &mut out
        ),
        None
    );
}

#[test]
fn trace_records_every_stage() {
    let snap = snapshot();
    let mut f = udp4(POD_A, GW_MAC_A, [10, 1, 0, 2], [8, 8, 8, 8], 64, 10);
    let mut rec = Recorder::default();
    let a = pipeline::process(&snap, 0, &mut f, &mut rec);
    assert_eq!(a, Action::Forward { port: 2 });
    let names: Vec<&str> = rec.stages.iter().map(|(s, _)| s.name()).collect();
    assert_eq!(
        names,
        [
            "parse",
            "l2",
            "port-security",
            "ttl",
            "route",
            "mtu",
            "neighbor",
            "rewrite"
        ]
    );
    assert!(
        rec.stages[4].1.contains("via 192.0.2.1"),
        "{:?}",
        rec.stages[4]
    );
}

#[test]
fn a_burst_gives_the_same_verdicts_and_bytes_as_packet_by_packet() {
    burst_equals_packet_by_packet(&snapshot());
}

#[test]
fn with_acls_a_burst_gives_the_same_verdicts_and_hits_as_packet_by_packet() {
    burst_equals_packet_by_packet(&acl_snapshot());
}

/// Runs a mixed burst from pod-a through `snap` as one burst and packet by packet:
/// same actions, same rewrites, same ACL hits.
fn burst_equals_packet_by_packet(snap: &Snapshot) {
    let snap = snap.clone();
    let mut frames: Vec<Vec<u8>> = Vec::new();
    for i in 0..200u32 {
        let dst = match i % 7 {
            0 => [10, 1, 0, 3],
            1 => [8, 8, (i % 250) as u8, 1],
            2 => [203, 0, 113, 9],
            3 => [198, 51, 100, 7],
            4 => [192, 0, 2, 10],
            5 => [10, 1, 0, 2],
            _ => [192, 0, 2, 1],
        };
        let ttl = if i % 11 == 0 { 1 } else { 64 };
        let len = if i % 13 == 0 {
            1450
        } else {
            (i as usize * 7) % 300
        };
        frames.push(udp4(POD_A, GW_MAC_A, [10, 1, 0, 2], dst, ttl, len));
        if i % 17 == 0 {
            frames.push(arp_request(POD_A, [10, 1, 0, 2], GW4.octets()));
        }
        if i % 23 == 0 {
            // Spoofed: another source address, another source MAC.
            frames.push(udp4(POD_A, GW_MAC_A, [198, 51, 100, 2], dst, 64, len));
            frames.push(udp4(POD_B, GW_MAC_A, [10, 1, 0, 2], dst, 64, len));
        }
        if i % 19 == 0 {
            let mut f = Vec::new();
            PacketBuilder::ethernet2(POD_A, GW_MAC_A)
                .ipv6(v6("fd00:1::2").octets(), v6("fd00:1::3").octets(), 64)
                .tcp(1, 2, 3, 4)
                .write(&mut f, &[1; 20])
                .expect("build");
            frames.push(f);
        }
    }
    frames.truncate(pipeline::MAX_BURST);
    let mut one_by_one = frames.clone();
    let mut single = pipeline::Scratch::default();
    let mut expected_hits = Vec::new();
    let expected: Vec<Action> = one_by_one
        .iter_mut()
        .map(|f| {
            let mut actions = [Action::Drop(DropReason::Malformed)];
            let mut one: &mut [u8] = f;
            pipeline::process_burst(
                &snap,
                0,
                &mut one,
                &mut actions,
                &mut single,
                None,
                &mut NoTrace,
            );
            expected_hits.extend_from_slice(single.acl_hits());
            actions[0]
        })
        .collect();
    let mut actions = vec![Action::Drop(DropReason::Malformed); frames.len()];
    let mut scratch = pipeline::Scratch::default();
    pipeline::process_burst(
        &snap,
        0,
        frames.as_mut_slice(),
        &mut actions,
        &mut scratch,
        None,
        &mut NoTrace,
    );
    assert_eq!(actions, expected);
    assert_eq!(frames, one_by_one, "same rewrites");
    let mut hits = scratch.acl_hits().to_vec();
    hits.sort_unstable_by_key(|h| (h.slot, h.bytes));
    expected_hits.sort_unstable_by_key(|h| (h.slot, h.bytes));
    assert_eq!(hits, expected_hits, "same ACL hits");
    assert!(expected
        .iter()
        .any(|a| matches!(a, Action::Forward { port: 1 })));
    assert!(expected
        .iter()
        .any(|a| matches!(a, Action::Forward { port: 2 })));
    assert!(expected.iter().any(|a| matches!(a, Action::Reply)));
    assert!(expected.iter().any(|a| matches!(a, Action::Punt(_))));
    if !snap.acl.tables.is_empty() {
        assert!(expected
            .iter()
            .any(|a| matches!(a, Action::Drop(DropReason::AclDeny))));
    }
    assert!(expected
        .iter()
        .any(|a| matches!(a, Action::IcmpError { .. })));
    assert!(expected
        .iter()
        .any(|a| matches!(a, Action::Drop(DropReason::Blackhole))));
    assert!(expected
        .iter()
        .any(|a| matches!(a, Action::Drop(DropReason::SpoofedSrcIp))));
    assert!(expected
        .iter()
        .any(|a| matches!(a, Action::Drop(DropReason::SpoofedSrcMac))));
}

/// Counts a burst's verdicts the way the worker counts them: drops by reason.
fn count(actions: &[Action]) -> WorkerCounters {
    let c = WorkerCounters::default();
    for a in actions {
        match *a {
            Action::Drop(reason) | Action::IcmpError { reason, .. } => c.drop_packets(reason, 0, 1),
            Action::Forward { .. } | Action::Reply => c.tx_packets.add(1),
            Action::Punt(_) => c.punts.add(1),
            Action::Handoff { .. } => c.handoffs.add(1),
            Action::Switch { .. } => c.switched.add(1),
            Action::Flood { .. } => c.flooded.add(1),
        }
    }
    c
}

/// Runs `frames` as one burst received on `port`.
fn burst(snap: &Snapshot, port: u16, frames: &mut [Vec<u8>]) -> Vec<Action> {
    let mut actions = vec![Action::Drop(DropReason::Malformed); frames.len()];
    let mut scratch = pipeline::Scratch::default();
    pipeline::process_burst(
        snap,
        port,
        frames,
        &mut actions,
        &mut scratch,
        None,
        &mut NoTrace,
    );
    actions
}

/// A neighbour solicitation (135) or advertisement (136) from pod-a's MAC, hop limit
/// 255, for `target`, with a link-layer address option carrying `lla`.
fn nd_from_a(msg: u8, src: &str, dst: &str, target: &str, lla: Option<[u8; 6]>) -> Vec<u8> {
    let mut body = v6(target).octets().to_vec();
    if let Some(mac) = lla {
        body.extend_from_slice(&[if msg == 136 { 2 } else { 1 }, 1]);
        body.extend_from_slice(&mac);
    }
    let dst = v6(dst);
    let dst_mac = if dst.is_multicast() {
        let o = dst.octets();
        [0x33, 0x33, o[12], o[13], o[14], o[15]]
    } else {
        GW_MAC_A
    };
    let mut f = Vec::new();
    PacketBuilder::ethernet2(POD_A, dst_mac)
        .ipv6(v6(src).octets(), dst.octets(), 255)
        .icmpv6(Icmpv6Type::Unknown {
            type_u8: msg,
            code_u8: 0,
            bytes5to8: if msg == 136 { [0x60, 0, 0, 0] } else { [0; 4] },
        })
        .write(&mut f, &body)
        .expect("build");
    f
}

#[test]
fn a_pod_sends_only_as_itself() {
    let snap = snapshot();
    // The finding of issue 18: a pod sending from 32 addresses 198.51.x.2, among its
    // own packets, to a remote address through the uplink.
    let mut frames: Vec<Vec<u8>> = Vec::new();
    for x in 0..32u8 {
        frames.push(udp4(POD_A, GW_MAC_A, [198, 51, x, 2], [8, 8, 8, 8], 64, 10));
        frames.push(udp4(POD_A, GW_MAC_A, [10, 1, 0, 2], [8, 8, 8, 8], 64, 10));
    }
    // Pod B's address from pod A's port, pod A's address with pod B's MAC.
    frames.push(udp4(POD_A, GW_MAC_A, [10, 1, 0, 3], [10, 1, 0, 2], 64, 10));
    frames.push(udp4(POD_B, GW_MAC_A, [10, 1, 0, 2], [10, 1, 0, 3], 64, 10));
    // ARP for the gateway: as itself (answered) and as pod B (dropped).
    frames.push(arp_request(POD_A, [10, 1, 0, 2], GW4.octets()));
    frames.push(arp_request(POD_A, [10, 1, 0, 3], GW4.octets()));
    // IPv6: its own address, another pod's, and a link-local source going off-link.
    let udp6 = |src: &str, dst: &str| {
        let mut f = Vec::new();
        PacketBuilder::ethernet2(POD_A, GW_MAC_A)
            .ipv6(v6(src).octets(), v6(dst).octets(), 64)
            .udp(1, 2)
            .write(&mut f, &[7; 8])
            .expect("build");
        f
    };
    frames.push(udp6("fd00:1::2", "fd00:1::3"));
    frames.push(udp6("fd00:1::3", "fd00:1::2"));
    frames.push(udp6("fe80::2", "fd00:1::3"));
    // Neighbour discovery: a solicitation for the gateway (answered), an advertisement
    // of pod B's address (dropped), duplicate address detection (not Ferrule's to
    // answer: arp-ignored, not spoofed).
    let group = pipeline::local::solicited_node(&GW6).to_string();
    frames.push(nd_from_a(135, "fe80::2", &group, "fe80::1", Some(POD_A)));
    frames.push(nd_from_a(
        136,
        "fe80::2",
        "ff02::1",
        "fd00:1::3",
        Some(POD_A),
    ));
    frames.push(nd_from_a(135, "::", "ff02::1:ff00:2", "fd00:1::2", None));
    let actions = burst(&snap, 0, &mut frames);
    let c = count(&actions);
    let drops = |r: DropReason| c.drops[r as usize].get();
    assert_eq!(drops(DropReason::SpoofedSrcIp), 32 + 1 + 2, "{actions:?}");
    assert_eq!(drops(DropReason::SpoofedSrcMac), 1);
    assert_eq!(drops(DropReason::SpoofedArp), 1);
    assert_eq!(drops(DropReason::SpoofedNd), 1);
    assert_eq!(
        drops(DropReason::ArpIgnored),
        1,
        "duplicate address detection: not about Ferrule's address, not spoofed"
    );
    assert_eq!(c.total_drops(), 32 + 3 + 1 + 1 + 1 + 1);
    // Only the pod's own packets go on: 32 to the uplink, its IPv6 to pod B, and the
    // two answers.
    for (i, a) in actions.iter().enumerate().take(64) {
        let want = if i % 2 == 1 {
            Action::Forward { port: 2 }
        } else {
            Action::Drop(DropReason::SpoofedSrcIp)
        };
        assert_eq!(*a, want, "frame {i}");
    }
    assert_eq!(actions[66], Action::Reply, "ARP for the gateway");
    assert_eq!(actions[68], Action::Forward { port: 1 }, "IPv6 to pod B");
    assert_eq!(actions[71], Action::Reply, "NS for the gateway");
    assert_eq!(c.tx_packets.get(), 32 + 3);
}

#[test]
fn the_uplink_and_pods_with_allowed_addresses_take_other_sources() {
    let mut snap = snapshot();
    // The uplink forwards whatever the router sends, from any source.
    let mut f = udp4(ROUTER, UPLINK_MAC, [198, 51, 7, 2], [10, 1, 0, 2], 64, 10);
    assert_eq!(run(&snap, 2, &mut f), Action::Forward { port: 0 });
    // A pod allowed 198.51.0.0/16 (a router pod) sends from it.
    let ips = [IpAddr::V4(Ipv4Addr::new(10, 1, 0, 2))];
    let allowed = [IpCidr::new(IpAddr::V4(Ipv4Addr::new(198, 51, 0, 0)), 16).expect("prefix")];
    snap.ports[0].pod_sources = PodSources::new(Some(EthernetAddress(POD_A)), &ips, &allowed);
    let mut f = udp4(POD_A, GW_MAC_A, [198, 51, 7, 2], [8, 8, 8, 8], 64, 10);
    assert_eq!(run(&snap, 0, &mut f), Action::Forward { port: 2 });
    let mut f = udp4(POD_A, GW_MAC_A, [198, 52, 7, 2], [8, 8, 8, 8], 64, 10);
    assert_eq!(
        run(&snap, 0, &mut f),
        Action::Drop(DropReason::SpoofedSrcIp)
    );
    // Its IPv6 now is link-local only: fd00:1::2 was not listed.
    let mut f = Vec::new();
    PacketBuilder::ethernet2(POD_A, GW_MAC_A)
        .ipv6(v6("fd00:1::2").octets(), v6("fd00:1::3").octets(), 64)
        .udp(1, 2)
        .write(&mut f, &[7; 8])
        .expect("build");
    assert_eq!(
        run(&snap, 0, &mut f),
        Action::Drop(DropReason::SpoofedSrcIp)
    );
}

#[test]
fn trace_shows_the_spoofed_drop() {
    let snap = snapshot();
    let mut f = udp4(POD_A, GW_MAC_A, [198, 51, 0, 2], [8, 8, 8, 8], 64, 10);
    let mut rec = Recorder::default();
    let a = pipeline::process(&snap, 0, &mut f, &mut rec);
    assert_eq!(a, Action::Drop(DropReason::SpoofedSrcIp));
    let lines: Vec<String> = rec
        .stages
        .iter()
        .map(|(s, d)| format!("{} {d}", s.name()))
        .collect();
    assert_eq!(lines.len(), 3, "{lines:?}");
    assert_eq!(
        lines[2],
        "port-security source 198.51.0.2 is not an address of pod-a (pod IPs, allowed addresses)"
    );
}

#[test]
fn hostile_and_edge_inputs() {
    let snap = snapshot();
    // ARP for another hardware type is not answered, even if it names our address.
    let mut f = arp_request(POD_A, [10, 1, 0, 2], GW4.octets());
    f[15] = 6; // htype 6 (IEEE 802)
    assert_eq!(run(&snap, 0, &mut f), Action::Drop(DropReason::Malformed));
    // A unicast IPv6 packet inside a multicast frame is not ours to route.
    let mut f = Vec::new();
    PacketBuilder::ethernet2(POD_A, [0x33, 0x33, 0, 0, 0, 1])
        .ipv6(v6("fd00:1::2").octets(), v6("fd00:1::3").octets(), 64)
        .udp(1, 2)
        .write(&mut f, &[0; 8])
        .expect("build");
    assert_eq!(
        run(&snap, 0, &mut f),
        Action::Drop(DropReason::DstMacMismatch)
    );
    // An echo with TTL 1 to the node's address on the uplink is answered, not expired.
    let mut f = Vec::new();
    PacketBuilder::ethernet2(POD_A, GW_MAC_A)
        .ipv4([10, 1, 0, 2], [192, 0, 2, 10], 1)
        .icmpv4_echo_request(5, 1)
        .write(&mut f, b"x")
        .expect("build");
    assert_eq!(run(&snap, 0, &mut f), Action::Reply);
    // ... and with TTL 64 too, through the route lookup's Local next hop.
    let mut f = Vec::new();
    PacketBuilder::ethernet2(POD_A, GW_MAC_A)
        .ipv4([10, 1, 0, 2], [192, 0, 2, 10], 64)
        .icmpv4_echo_request(5, 2)
        .write(&mut f, b"x")
        .expect("build");
    assert_eq!(run(&snap, 0, &mut f), Action::Reply);
    assert_eq!(
        &f[26..30],
        &[192, 0, 2, 10],
        "replied from the node address"
    );
    // No ICMP error about a packet to a broadcast address.
    let f = udp4(POD_A, GW_MAC_A, [10, 1, 0, 2], [255, 255, 255, 255], 1, 10);
    let parsed = pipeline::parse(&f, 0).expect("parses");
    assert!(!icmp_error::allowed(&parsed, &f));
}

#[test]
fn neighbor_solicitations_are_checked() {
    let snap = snapshot();
    let group = pipeline::local::solicited_node(&GW6);
    let ns = |sll: bool| {
        let mut body = GW6.octets().to_vec();
        if sll {
            body.extend_from_slice(&[1, 1]);
            body.extend_from_slice(&POD_A);
        }
        let mut f = Vec::new();
        PacketBuilder::ethernet2(POD_A, [0x33, 0x33, 0xff, 0, 0, 1])
            .ipv6(v6("fe80::2").octets(), group.octets(), 255)
            .icmpv6(Icmpv6Type::Unknown {
                type_u8: 135,
                code_u8: 0,
                bytes5to8: [0; 4],
            })
            .write(&mut f, &body)
            .expect("build");
        f
    };
    let mut f = ns(true);
    f[14 + 40 + 2] ^= 1; // breaks the checksum
    assert_eq!(run(&snap, 0, &mut f), Action::Drop(DropReason::Malformed));
    let mut f = ns(true);
    f[14 + 7] = 64; // hop limit other than 255: not from on-link
    assert_eq!(run(&snap, 0, &mut f), Action::Drop(DropReason::Malformed));
    // Without the source link-layer option, to a multicast group: the answer needs the
    // target link-layer option, which does not fit in place.
    let mut f = ns(false);
    assert_eq!(run(&snap, 0, &mut f), Action::Drop(DropReason::Malformed));
}

/// The test snapshot with ACLs: pod-a ingress denies UDP to 10.1.0.3 port 53 and
/// UDP to 8.8.8.0/24 port 53 (the rest permitted); pod-b egress permits TCP only (the
/// rest matches nothing: denied); uplink egress permits all, and the global table
/// denies 1.1.1.0/24 and reflects the rest.
fn acl_snapshot() -> Snapshot {
    let mut snap = snapshot();
    let any = "any";
    let tables = vec![
        table(
            0,
            "pod-a-in",
            vec![
                rule(AclAction::Deny, Proto::UDP, "10.1.0.3/32", Some(53)),
                rule(AclAction::Deny, Proto::UDP, "8.8.8.0/24", Some(53)),
                rule(AclAction::Permit, Proto::Any, any, None),
            ],
        ),
        table(
            1,
            "pod-b-out",
            vec![rule(AclAction::Permit, Proto::TCP, any, None)],
        ),
        table(
            2,
            "uplink-out",
            vec![rule(AclAction::Permit, Proto::Any, any, None)],
        ),
        table(
            3,
            "global",
            vec![
                rule(AclAction::Deny, Proto::Any, "1.1.1.0/24", None),
                rule(AclAction::Reflect, Proto::Any, any, None),
            ],
        ),
    ];
    let mut ingress = [None; MAX_PORTS];
    let mut egress = [None; MAX_PORTS];
    ingress[0] = Some(0);
    egress[1] = Some(1);
    egress[2] = Some(2);
    snap.acl = Arc::new(AclTables::new(tables, ingress, egress, Some(3), 1));
    snap
}

fn udp4_ports(dst: [u8; 4], dst_port: u16) -> Vec<u8> {
    let mut f = Vec::new();
    PacketBuilder::ethernet2(POD_A, GW_MAC_A)
        .ipv4([10, 1, 0, 2], dst, 64)
        .udp(40000, dst_port)
        .write(&mut f, &[0; 18])
        .expect("build");
    f
}

/// The verdict of one packet and the counter slots it hit.
fn verdict(snap: &Snapshot, port: u16, mut frame: Vec<u8>) -> (Action, Vec<u32>) {
    let mut actions = [Action::Drop(DropReason::Malformed)];
    let mut scratch = pipeline::Scratch::default();
    let mut one: &mut [u8] = &mut frame;
    pipeline::process_burst(
        snap,
        port,
        &mut one,
        &mut actions,
        &mut scratch,
        None,
        &mut NoTrace,
    );
    (
        actions[0],
        scratch.acl_hits().iter().map(|h| h.slot).collect(),
    )
}

#[test]
fn acls_apply_on_ingress_egress_and_the_global_table() {
    let snap = acl_snapshot();
    let deny = Action::Drop(DropReason::AclDeny);
    // Ingress rule 0 denies; the frame length is counted.
    let f = udp4_ports([10, 1, 0, 3], 53);
    let len = f.len() as u32;
    let mut scratch = pipeline::Scratch::default();
    let mut frames = vec![f];
    let mut actions = [Action::Drop(DropReason::Malformed)];
    pipeline::process_burst(
        &snap,
        0,
        frames.as_mut_slice(),
        &mut actions,
        &mut scratch,
        None,
        &mut NoTrace,
    );
    assert_eq!(actions[0], deny);
    assert_eq!(
        scratch.acl_hits(),
        [pipeline::AclHit {
            slot: 0,
            bytes: len
        }]
    );
    // Ingress permits (rule 2), then pod-b's empty egress table denies (no match).
    assert_eq!(
        verdict(&snap, 0, udp4_ports([10, 1, 0, 3], 54)),
        (deny, vec![2, 199])
    );
    // To the uplink: ingress rule 2, uplink egress rule 0, global rule 1 (reflect).
    assert_eq!(
        verdict(&snap, 0, udp4_ports([9, 9, 9, 9], 53)),
        (Action::Forward { port: 2 }, vec![2, 200, 301])
    );
    assert_eq!(
        verdict(&snap, 0, udp4_ports([8, 8, 8, 8], 53)),
        (deny, vec![1])
    );
    assert_eq!(
        verdict(&snap, 0, udp4_ports([1, 1, 1, 1], 80)),
        (deny, vec![2, 200, 300])
    );
    // From pod-b (no ingress table) to pod-a (no egress table): no ACL at all.
    let mut f = Vec::new();
    PacketBuilder::ethernet2(POD_B, GW_MAC_B)
        .ipv4([10, 1, 0, 3], [10, 1, 0, 2], 64)
        .udp(1, 2)
        .write(&mut f, &[0; 4])
        .expect("build");
    assert_eq!(verdict(&snap, 1, f), (Action::Forward { port: 0 }, vec![]));
    // ARP and echo for the gateway are Ferrule's own business: no ACL applies.
    let mut deny_all = snapshot();
    let mut ingress = [None; MAX_PORTS];
    ingress[0] = Some(0);
    deny_all.acl = Arc::new(AclTables::new(
        vec![table(0, "nothing", Vec::new())],
        ingress,
        [None; MAX_PORTS],
        None,
        1,
    ));
    let arp = arp_request(POD_A, [10, 1, 0, 2], GW4.octets());
    assert_eq!(verdict(&deny_all, 0, arp), (Action::Reply, vec![]));
    assert_eq!(
        verdict(&deny_all, 0, udp4_ports([10, 1, 0, 3], 7)),
        (deny, vec![99])
    );
}

#[test]
fn trace_shows_table_rule_and_action() {
    let snap = acl_snapshot();
    let mut f = udp4_ports([1, 1, 1, 1], 80);
    let mut rec = Recorder::default();
    let a = pipeline::process(&snap, 0, &mut f, &mut rec);
    assert_eq!(a, Action::Drop(DropReason::AclDeny));
    let acl: Vec<&str> = rec
        .stages
        .iter()
        .filter(|(s, _)| s.name() == "acl")
        .map(|(_, d)| d.as_str())
        .collect();
    assert_eq!(
        acl,
        [
            "ingress table pod-a-in rule 2: permit",
            "egress table uplink-out rule 0: permit",
            "global table global rule 0: deny",
        ]
    );
    let mut f = udp4_ports([10, 1, 0, 3], 54);
    let mut rec = Recorder::default();
    pipeline::process(&snap, 0, &mut f, &mut rec);
    assert!(rec
        .stages
        .iter()
        .any(|(_, d)| d == "egress table pod-b-out: no rule matches: deny"));
}
